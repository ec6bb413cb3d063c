"""The compiled packet path (kwsniff/pipeline/_fastpath.c), TLS record loop (kwsniff/tls/_records.c) and
Produce/Fetch partition walker (kwsniff/rows/_partfacts.c) and the Parquet writer's row-to-column
conversion (kwsniff/sinks/_columns.c); everything else is in pyproject.toml.

The extensions are optional: where no C compiler is found, `pip install .` still succeeds and kwsniff
runs the pure-Python path, which gives the same tables (docs/performance.md, "The compiled path").
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "kwsniff.pipeline._fastpath",
            ["kwsniff/pipeline/_fastpath.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        # TLS application-data records on one OpenSSL cipher context (libcrypto loaded at import).
        Extension(
            "kwsniff.tls._records",
            ["kwsniff/tls/_records.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        # Produce and Fetch bodies straight to the partitions table's facts (kwsniff/rows/compiled.py).
        Extension(
            "kwsniff.rows._partfacts",
            ["kwsniff/rows/_partfacts.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        # Row tuples to Arrow column buffers for the Parquet writer (kwsniff/sinks/parquet.py).
        Extension(
            "kwsniff.sinks._columns",
            ["kwsniff/sinks/_columns.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
    ]
)
