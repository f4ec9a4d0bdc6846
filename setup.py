"""Builds the optional C extensions: the sampler ``flameprof._native``, the folded-text reader
``flameprof._folded``, the perf script collapser ``flameprof._perf`` and attach's injector
``flameprof._inject``; metadata lives in pyproject.toml.

``optional=True``: when the compiler or headers are missing the install still succeeds and
flameprof falls back to its pure-Python sampler (with a one-time warning) and folded reader.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "flameprof._native",
            sources=["native/sampler.c", "native/steps.c", "native/interp_internals.c"],
            depends=["native/interp_internals.h", "native/steps.h"],
            extra_compile_args=["-O2", "-std=c99", "-Wall", "-Wno-missing-field-initializers"],
            optional=True,
        ),
        Extension(
            "flameprof._inject",
            sources=["native/inject.c"],
            extra_compile_args=["-O2", "-std=c99", "-Wall"],
            optional=True,
        ),
        Extension(
            "flameprof._folded",
            sources=["native/folded.c"],
            depends=["native/byte_hash.h"],
            extra_compile_args=["-O2", "-std=c99", "-Wall"],
            optional=True,
        ),
        Extension(
            "flameprof._perf",
            sources=["native/perf_collapse.c"],
            depends=["native/byte_hash.h"],
            extra_compile_args=["-O2", "-std=gnu99", "-Wall"],
            optional=True,
        ),
    ]
)
