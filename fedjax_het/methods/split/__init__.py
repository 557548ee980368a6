"""CSE-FSL (communication- and storage-efficient federated split learning) and
its baselines: `split_learning` (CSE-FSL, FSL_AN), `fsl_baselines` (FSL_MC,
FSL_OC) and `split_accounting` (the bytes and storage each protocol charges).
"""
