"""The shared mechanism every method is made of, one idea per module, composed
into `methods.base.FederatedAlgorithm`: what a method declares (`traits`),
who takes part and how (`planning`), the clients' local training
(`local_training`), the server's rule (`server`) and what a round charges and
how the model is evaluated (`accounting`). A method overrides the hooks it
changes; `methods/base.py`'s module docstring lists them."""
