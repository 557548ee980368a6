"""Co-S²P (semi-asynchronous training of learned structured submodels of a
ViT) and the ViT baselines of its tables: `cos2p` (Co-S²P, FedAvg (Full),
FedRolex, RAM-Fed), `fedpm`, `prunefl`, `platon`, `adavit`, `qvit`, and
`masked_eval` (evaluation of masked submodels).
"""
