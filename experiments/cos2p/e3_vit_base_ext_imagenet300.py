"""Co-S²P E3: ViT-Base(Ext.), 16 blocks from the pretrained ViT-B/16, on ImageNet300 (Tab. 2).

Command:   fedjax-het --config experiments/cos2p/e3_vit_base_ext_imagenet300.py \
               --workdir runs/cos2p/e3 --config.data_dir=DIR \
               --config.init_params_file=/path/ViT-B_16.npz
           runs every row of the paper's table in <workdir>/<label> (same data, clients and clock):
           fedavg_full, fedavg_platon, fedavg_adavit, fedavg_qvit, fedpm, prunefl, ram_fed, fedrolex
           (synchronous: μ = 1, T_clk = 0), cos2p and cos2p_async (μ = 1/N, T_clk = 0); a finished
           row is kept when the command is run again. get_config() is Co-S²P's row alone.
Needs:     ImageNet-1k prepared by TFDS under DIR. TFDS cannot download it: put
           ILSVRC2012_img_train.tar and ILSVRC2012_img_val.tar (image-net.org) in
           DIR/downloads/manual, then python -c "import tensorflow_datasets as tfds;
           tfds.builder('imagenet2012', data_dir='DIR').download_and_prepare()".
           The pretrained ViT-B/16 as an .npz of google-research/vision_transformer or big_vision
           (fedjax_het.models.vit_pretrained): the paper does not name its checkpoint; e.g.
           https://storage.googleapis.com/vit_models/imagenet21k/ViT-B_16.npz (ImageNet-21k), or
           .../imagenet21k+imagenet2012/ViT-B_16-224.npz (fine-tuned on ImageNet-1k). Without
           --config.init_params_file the run stops at once naming the missing file.
Memory:    300 classes at 224 px are ≈ 400k float32 images, ≈ 240 GB of host memory
           (fedjax_het.data.sources._load_imagenet2012), plus the padded per-client copy that the
           engine places on the accelerator(s) (shard it over devices with client_devices). For
           one 80 GB GPU scale the images down: --config.dataset_options.image_size=112 (7 × 7
           patches, the pretrained positions resized; ≈ 60 GB) or 64 (≈ 20 GB).
Paper (%, Tab. 2, ViT-Base(Ext.) / ImageNet300; Server Top1 Top5 F1 | Client Top1 Top5 F1 | RU):
             FedAvg(Full)    56.4 78.3 55.8 | 50.4 73.0 49.9 |  61.4
             FedAvg+PLATON   32.3 55.3 31.6 | 30.7 51.8 31.6 |  75.1
             FedAvg+AdaViT   31.4 54.3 31.9 | 30.8 51.4 29.3 |  74.4
             FedAvg+Q-ViT    30.7 53.2 30.2 | 28.1 52.1 27.6 |  74.1
             FedPM           27.3 52.2 26.3 | 25.4 49.1 24.1 |  73.6
             PruneFL         34.3 58.4 32.8 | 31.0 54.4 30.4 |  76.9
             FedRolex        38.1 63.2 37.3 | 35.6 58.5 34.7 |  78.2
             RAM-Fed         36.4 60.8 35.5 | 30.4 53.1 30.1 |  77.5
             Co-S²P          46.9 72.5 46.0 | 45.7 67.5 44.5 |  90.6
             Co-S²P(Async.)  43.4 68.2 43.6 | 41.3 65.6 41.5 | 100.0
           Our logs: test_accuracy / test_top5 / test_f1 (server: full model, deepest exit),
           client_* (each client's personalised submodel on its local test split), and
           summary.json's ru_eq17 (Eq. 17 on the simulated clock). Not run here (no ImageNet).

Paper setting (App. E, Tab. 6/7)                  → our keys
  ImageNet300: 300 ImageNet-1k classes sampled at    dataset='imagenet2012',
    random; server test set = their ImageNet val       dataset_options.num_classes=300,
    images, client pool = their train split            class_seed=0 (our draw, not the paper's)
  224 px, ImageNet mean/std, no augmentation         dataset_options.image_size=224, augment='none'
  ViT-Base(Ext.) 16 × 768, MLP 3072, 12 heads,       model='vit_base_ext', init_params_file:
    patch 16: the pretrained ViT-B in blocks 1–12,     blocks 9–12 repeated as 13–16 (the loader's
    the last 4 "by the last 4 layers of the            default for a model 4 blocks deeper than
    pretrained model" (read: 9–12 copied to 13–16)     the file; the head is not loaded: 300 here)
  clients in type order: 1 × NX 8G, 2 × NX 16G,      num_clients = clients_per_round = 16,
    3 × AGX 32G, 10 × AGX 64G                          cos2p.device_types
  Dirichlet α = 1.5; avg dataset size per type       partition='sized_dirichlet', alpha=1.5,
    4737 / 9476 / 18932 / 29372                        client_sizes (relative)
  each client's data split 8:2 into train / test     local_test=True, local_test_fraction=0.2
  R_n 0.015625 / 0.0625 / 0.25 / 0.5625             cos2p.budgets
  100 rounds, Adan, lr 0.00025, weight decay 0.05    rounds, cos2p.optimizer='adan', client_lr,
    (the authors' code)                                client_weight_decay
  E = 5, Q̂ = 10, Ê = 5, mask lr 0.001               cos2p.epochs, mask_rounds, mask_epochs, mask_lr
  λ1 = 1.5, λ2 = 0.3, t = 3                          cos2p.lambda_budget, lambda_kd, temperature
  μ = 0.4, T_clk = 150 s                             clock.mu, clock.t_clk
The per-client lists come from paper_settings.paper_clients('E3') (Tab. 7).

Deviations: one batch size for every client, 32 (our engine has one; Tab. 7 uses B = 8 / 32 /
64 / 128 by type), which the simulated clock also uses. The whole train pool of the 300
classes (≈ 385k) is split in proportion to Tab. 7's sizes, ≈ 3% more per client than their sum
(374k). Our ViT's MLP uses the exact GELU, the checkpoint's the tanh one (models.vit_pretrained).
Client round times are the analytic Jetson model (systems.vit_cost), not measurements.
"""
from cos2p_setup import paper_config, table_configs

# Set with --config.init_params_file=PATH; this placeholder stops the run with a one-line error.
CHECKPOINT = '/path/to/ViT-B_16.npz'


def get_config():
  return paper_config('E3', dataset_options={'num_classes': 300, 'class_seed': 0, 'image_size': 224},
                      init_params_file=CHECKPOINT, rounds=100, client_lr=0.00025,
                      mask_lr=0.001, lambda_budget=1.5, lambda_kd=0.3)


def get_configs():
  return table_configs(get_config())
