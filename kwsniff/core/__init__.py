"""The core both doors call (issue 46): the command line (kwsniff.commands) and the Python API
(kwsniff.api) parse what they are given, call these, and say the outcome their own way.

options.py  every decoding, output and report option, once (default, unit, check, help)
values.py   the checks of those values
decoding.py the decoder's SessionOptions from the options
decode.py   inputs checked, then decoded one by one into in-memory sinks (the API's read)
output.py   an output's summaries, its commit, and the check of its file names
answers.py  what a report needs of a dataset, and the sections chosen by name
exits.py    the exit statuses the errors of both doors carry
"""
