from tfgrpo.cli.app import main

main()
