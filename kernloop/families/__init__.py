"""Kernel families: the built-in tuner's Triton templates, recognised from what a torch reference
runs (softmax, RMSNorm/LayerNorm, activations, matmul with its epilogue), confirmed, filled in."""
