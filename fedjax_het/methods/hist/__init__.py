"""HIST (Fang, Han & Brinton): hierarchical training over wireless cells with
disjoint neuron partitions, OMA or AirComp edge aggregation, and HFedAvg."""
