from kwsniff.entry import run

run()
