from kwsniff.cli import run

run()
