"""Builds the optional C extensions: the sampler ``flameprof._native``, the folded-text reader
``flameprof._folded``, the perf script collapser ``flameprof._perf``, the torch.profiler trace
reader ``flameprof._kineto``, the tree passes ``flameprof._trees`` and attach's injector
``flameprof._inject``; metadata lives in pyproject.toml.

``optional=True``: when the compiler or headers are missing the install still succeeds and
flameprof falls back to its pure-Python sampler (with a one-time warning) and folded reader.
"""

from setuptools import Extension, setup

# A call to an undeclared function compiles to one returning int: a pointer cut to 32 bits at run
# time (PyFrame_GetBack on 3.10, whose Python.h does not declare it). Refused at build time.
STRICT = ["-O2", "-Wall", "-Werror=implicit-function-declaration"]

setup(
    ext_modules=[
        Extension(
            "flameprof._native",
            sources=[
                "native/sampler.c",
                "native/clock.c",
                "native/hash_map.c",
                "native/steps.c",
                "native/interp_internals.c",
            ],
            depends=[
                "native/sampler.h",
                "native/clock.h",
                "native/hash_map.h",
                "native/growable.h",
                "native/steps.h",
                "native/interp_internals.h",
            ],
            extra_compile_args=[*STRICT, "-std=c99", "-Wno-missing-field-initializers"],
            optional=True,
        ),
        Extension(
            "flameprof._inject",
            sources=["native/inject.c"],
            extra_compile_args=[*STRICT, "-std=c99"],
            optional=True,
        ),
        Extension(
            "flameprof._folded",
            sources=["native/folded.c"],
            depends=["native/byte_buffer.h", "native/byte_hash.h"],
            extra_compile_args=[*STRICT, "-std=c99"],
            optional=True,
        ),
        Extension(
            "flameprof._trees",
            sources=["native/tree_passes.c"],
            extra_compile_args=[*STRICT, "-std=c99"],
            optional=True,
        ),
        Extension(
            "flameprof._kineto",
            sources=["native/kineto.c"],
            depends=["native/byte_buffer.h", "native/byte_hash.h"],
            extra_compile_args=[*STRICT, "-std=c99"],
            optional=True,
        ),
        Extension(
            "flameprof._perf",
            sources=["native/perf_collapse.c"],
            depends=["native/byte_buffer.h", "native/byte_hash.h"],
            extra_compile_args=[*STRICT, "-std=gnu99"],
            optional=True,
        ),
    ]
)
