"""The sub-commands of `kwsniff`, one module each."""
