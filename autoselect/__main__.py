from autoselect.cli import main

main()
