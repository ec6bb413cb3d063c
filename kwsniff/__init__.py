"""kwsniff: a passive Apache Kafka protocol analyzer.

Layers, bottom up (each imports only from layers below it; docs/development.md, tests/test_layers.py):
defaults -> capture (files) -> net (L2-L4 parsing) -> tcp (reassembly) -> protocol (schema-driven
decoding) -> kafka (framing, pairing, Kafka evidence) -> records (record batches) -> rows -> connection
-> session (one pass over packets) -> tables (Arrow schemas) -> sinks (Parquet) -> run/render ->
commands -> cli -> entry.
"""

__version__ = "0.1.0"
