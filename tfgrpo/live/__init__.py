"""The learner beside the server: Training-Free GRPO on the rewarded exchanges of a live trace store, from
the deployment's champion, proposing each new library as the challenger (`tfgrpo learner`)."""
