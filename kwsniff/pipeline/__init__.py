"""The core pipeline: one Session per run drives packets through connections (TCP reassembly,
Kafka framing, pairing, decoding) into row sinks; run and run_live feed it from files and
interfaces."""
