"""Co-S²P (semi-asynchronous training of learned structured submodels of a
ViT) and the ViT baselines of its tables, on one ViT engine: `vit_engine`
(the shared engine on the virtual clock, no paper's method), `budget_masks`
(Eq. 2's mask loss, Co-S²P's and FedPM's), `cos2p` (Co-S²P),
`width_baselines` (FedAvg (Full), FedRolex, RAM-Fed), `fedpm`, `prunefl`,
`platon`, `adavit`, `qvit`, and `masked_eval` (evaluation of masked
submodels).
"""
