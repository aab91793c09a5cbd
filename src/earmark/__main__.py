from earmark.cli import main

main()
