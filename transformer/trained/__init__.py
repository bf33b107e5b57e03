"""A trained run's workdir, read after training: its checkpoint loaded (loading.py), its
held-out split evaluated and files decoded or scored (evaluate.py). Above training/, whose
Run and steps it reads with; below research/ and the scripts."""
