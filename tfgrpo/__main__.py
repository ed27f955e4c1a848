from tfgrpo.cli.app import main

# The guard: vLLM's engine starts in a spawned process, which imports this module again.
if __name__ == "__main__":
    main()
