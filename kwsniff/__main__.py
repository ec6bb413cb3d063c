from kwsniff.cli import main

main()
