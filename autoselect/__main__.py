from autoselect.cli import run

run()
