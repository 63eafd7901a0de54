"""What ``import neuronxcc`` resolves to under :func:`systolic.nki.install`: the parent of
the older module names (``neuronxcc.nki``, ``neuronxcc.nki.isa`` ...), nothing else."""
