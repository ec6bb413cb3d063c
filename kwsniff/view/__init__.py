"""The live view and metrics of `kwsniff capture`, fed from the rows."""
