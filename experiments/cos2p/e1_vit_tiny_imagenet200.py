"""Co-S²P E1: "ViT-Tiny" from scratch on ImageNet200, 8 Jetson clients (Li et al., Tab. 1).

Command:   fedjax-het --config experiments/cos2p/e1_vit_tiny_imagenet200.py \
               --workdir runs/cos2p/e1 --config.data_dir=DIR
           runs every row of the paper's table in <workdir>/<label> (same data, clients and clock):
           fedavg_full, fedavg_platon, fedavg_adavit, fedavg_qvit, fedpm, prunefl, ram_fed, fedrolex
           (synchronous: μ = 1, T_clk = 0), cos2p and cos2p_async (μ = 1/N, T_clk = 0); a finished
           row is kept when the command is run again. get_config() is Co-S²P's row alone.
Needs:     ImageNet-1k prepared by TFDS under DIR. TFDS cannot download it: put
           ILSVRC2012_img_train.tar and ILSVRC2012_img_val.tar (image-net.org) in
           DIR/downloads/manual, then python -c "import tensorflow_datasets as tfds;
           tfds.builder('imagenet2012', data_dir='DIR').download_and_prepare()".
Memory:    the 200 classes at 224 px are ≈ 270k float32 images, ≈ 163 GB of host memory
           (fedjax_het.data.sources._load_imagenet2012), plus the padded per-client copy that the
           engine places on the accelerator(s) (≈ 200 GB with the local test splits; shard it
           over devices with client_devices). For one 80 GB GPU scale the images down:
           --config.dataset_options.image_size=64 (4 × 4 patches, ≈ 13 GB) or 112 (≈ 41 GB).
Paper (%, Tab. 1, ViT-Tiny / ImageNet200; Server Top1 Top5 F1 | Client Top1 Top5 F1 | RU):
             FedAvg(Full)    38.7 63.6 37.3 | 39.2 64.1 37.1 |  63.5
             FedAvg+PLATON   19.3 42.7 19.1 | 16.5 37.5 17.4 |  70.4
             FedAvg+AdaViT   17.9 36.1 16.2 | 14.3 34.5 14.0 |  67.3
             FedAvg+Q-ViT    17.6 40.1 15.8 | 14.9 34.8 13.6 |  70.7
             FedPM           16.2 38.7 15.5 | 14.2 34.0 12.9 |  71.8
             PruneFL         21.8 42.2 19.1 | 20.2 39.1 17.1 |  69.2
             FedRolex        24.3 48.0 23.1 | 20.7 45.8 20.5 |  72.5
             RAM-Fed         23.6 46.0 21.5 | 19.4 41.2 19.3 |  69.9
             Co-S²P          33.1 59.2 31.9 | 31.8 56.6 30.5 |  87.9
             Co-S²P(Async.)  27.7 53.2 27.3 | 26.7 49.8 26.7 | 100.0
           Our logs: test_accuracy / test_top5 / test_f1 (server: full model, deepest exit),
           client_* (each client's personalised submodel on its local test split), and
           summary.json's ru_eq17 (Eq. 17 on the simulated clock). Not run here (no ImageNet).

Paper setting (App. E, Tab. 6/7)                  → our keys
  ImageNet200: the 200 Tiny-ImageNet wnids at full   dataset='imagenet2012',
    resolution (the authors' code; the text says       dataset_options.classes='tiny_imagenet'
    "randomly sampled"); server test set = their       (a random draw instead: classes=None,
    ImageNet val images, client pool = train split     num_classes=200, class_seed=S)
  224 px, ImageNet mean/std, no augmentation         dataset_options.image_size=224, augment='none'
  "ViT-Tiny" 8 × 512, MLP 2048, 8 heads, patch 16,   model='vit_tiny', init_params_file=''
    trained from scratch
  clients in type order: 1 × NX 8G, 3 × AGX 32G,     num_clients = clients_per_round = 8,
    4 × AGX 64G                                        cos2p.device_types
  Dirichlet α = 1.5; avg dataset size per type       partition='sized_dirichlet', alpha=1.5,
    8277 / 24960 / 36992                               client_sizes (relative)
  each client's data split 8:2 into train / test     local_test=True, local_test_fraction=0.2
  R_n 0.0625 / 0.5625 / 0.5625                       cos2p.budgets
  120 rounds, Adan, lr 0.005, weight decay 0.05      rounds, cos2p.optimizer='adan', client_lr,
    (the authors' code)                                client_weight_decay
  E = 5, Q̂ = 20, Ê = 5, mask lr 0.01                cos2p.epochs, mask_rounds, mask_epochs, mask_lr
  λ1 = 1.0, λ2 = 0.2, t = 3                          cos2p.lambda_budget, lambda_kd, temperature
  μ = 0.5, T_clk = 60 s                              clock.mu, clock.t_clk
The per-client lists come from paper_settings.paper_clients('E1') (Tab. 7).

Deviations: one batch size for every client, 32 (our engine has one; Tab. 7 uses B = 8 / 64 /
128 by type), which the simulated clock also uses. The whole train pool of the 200 classes
(≈ 260k) is split in proportion to Tab. 7's sizes, ≈ 12% more per client than their sum (231k).
Client round times are the analytic Jetson model (systems.vit_cost), not measurements.
"""
from cos2p_setup import paper_config, table_configs


def get_config():
  return paper_config('E1', dataset_options={'classes': 'tiny_imagenet', 'image_size': 224},
                      init_params_file='', rounds=120, client_lr=0.005,
                      mask_lr=0.01, lambda_budget=1.0, lambda_kd=0.2)


def get_configs():
  return table_configs(get_config())
