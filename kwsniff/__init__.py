"""kwsniff: a passive Apache Kafka protocol analyzer.

Layers, bottom up (each imports only from layers below it):
capture (files) -> net (L2-L4 parsing) -> tcp (reassembly) -> kafka (framing, pairing)
-> protocol (schema-driven decoding) -> records (record batches) -> session (one pass over packets)
-> tables (rows, Arrow schemas) -> sinks (Parquet) -> cli.
"""

__version__ = "0.1.0"
