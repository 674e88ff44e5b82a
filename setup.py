"""Declares the Cython engine only; everything else is in pyproject.toml.

The engine is not optional: a failed Cython build fails the install. Set
MEMWALL_CYTHON_DEBUG=1 to build with bounds and wraparound checks switched on.
"""

import os

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

DEBUG = os.environ.get("MEMWALL_CYTHON_DEBUG", "") not in ("", "0")

directives = {
    "language_level": 3,
    "boundscheck": DEBUG,
    "wraparound": DEBUG,
    "cdivision": True,
    "initializedcheck": DEBUG,
    "nonecheck": DEBUG,
}

extensions = [
    Extension(
        "memwall._csim",
        sources=["csim/_csim.pyx"],
        include_dirs=[numpy.get_include(), "csim"],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=["-O0", "-g"] if DEBUG else ["-O3"],
    ),
    # Text traces (din, xdin) scanned in C, many lines per call.
    Extension(
        "memwall._textparse",
        sources=["csim/_textparse.pyx"],
        include_dirs=[numpy.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=["-O0", "-g"] if DEBUG else ["-O3"],
    ),
    # The host probe (memwall machines detect): timed loops, so always optimised.
    Extension(
        "memwall._probe",
        sources=["csim/_probe.pyx"],
        extra_compile_args=["-O3"],
    ),
]

setup(ext_modules=cythonize(extensions, compiler_directives=directives, include_path=["csim"]))
