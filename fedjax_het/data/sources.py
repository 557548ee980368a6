"""Centralised datasets as host numpy arrays: offline sets (digits, synthetic) and real image sets.

`load_dataset(name, ...)` returns an `ArrayDataset` with images as float32 NHWC in [0, 1]
(or standardised per channel with `normalize=True`) and int32 labels. Nothing is ever
downloaded here. The real sets (mnist, fashion_mnist, emnist, cifar10, cifar100) are read from
`data_dir` in this order:

1. the dataset's own distribution files, when any of them is in `data_dir`
   (`fedjax_het.data.files`): the IDX files of MNIST / Fashion-MNIST / EMNIST
   (`train-images-idx3-ubyte[.gz]` ..., EMNIST's named `emnist-<split>-...`), the python pickles
   of CIFAR (`cifar-10-batches-py/`, `cifar-100-python/`, or their contents). On Debian,
   `apt-get install dataset-fashion-mnist` puts Fashion-MNIST's in /usr/share/datasets/fashion-mnist;
2. otherwise TFDS's prepared data in `data_dir` (no `data_dir`: TFDS's default directory);
3. otherwise one line saying how to provide the files. A `data_dir` that does not exist, or
   raw files that are incomplete, truncated or inconsistent, stop with one line naming them.

Both readers give the same arrays and class counts (TFDS copies the same files); EMNIST is
turned upright by either (see `_load_emnist`).

`imagenet2012` is read from TFDS's prepared data only (a class subset, resized and
ImageNet-normalised: `_load_imagenet2012`, which states its memory).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import os

import numpy as np

from fedjax_het.data import files


@dataclasses.dataclass(frozen=True)
class ArrayDataset:
  """A centralised dataset with a fixed train/test split.

  Attributes:
    name: dataset name as passed to `load_dataset`.
    x_train: [n_train, *feature_shape] float32, e.g. [n, H, W, C] images or [n, d] features.
    y_train: [n_train] int32 labels in [0, num_classes).
    x_test: [n_test, *feature_shape] float32.
    y_test: [n_test] int32.
    num_classes: number of label classes.
  """
  name: str
  x_train: np.ndarray
  y_train: np.ndarray
  x_test: np.ndarray
  y_test: np.ndarray
  num_classes: int

  def __post_init__(self):
    for split, x, y in (('train', self.x_train, self.y_train), ('test', self.x_test, self.y_test)):
      if y.ndim != 1 or x.shape[:1] != y.shape:
        raise ValueError(f'{self.name} {split}: x {x.shape} and y {y.shape} must share the '
                         'leading axis.')
    if self.x_train.shape[1:] != self.x_test.shape[1:]:
      raise ValueError(f'{self.name}: train features {self.x_train.shape[1:]} differ from test '
                       f'features {self.x_test.shape[1:]}.')


def _load_digits(*, data_dir, seed, test_fraction=0.2):
  """scikit-learn's bundled 8x8 digits (1797 images), stratified seeded split, x = pixel / 16."""
  del data_dir
  from sklearn import datasets, model_selection
  if not 0 < test_fraction < 1:
    raise ValueError(f'test_fraction must lie in (0, 1), got {test_fraction}.')
  digits = datasets.load_digits()
  x = (digits.images / 16.0).astype(np.float32)[..., None]
  y = digits.target.astype(np.int32)
  x_train, x_test, y_train, y_test = model_selection.train_test_split(
      x, y, test_size=test_fraction, random_state=seed, stratify=y)
  return ArrayDataset('digits', x_train, y_train, x_test, y_test, num_classes=10)


def _load_synthetic(*, data_dir, seed, num_train=2000, num_test=500, shape=(8, 8, 1),
                    num_classes=10, noise=1.0):
  """Gaussian class clusters: x = prototype[y] + noise * N(0, I), prototypes ~ N(0, I).

  Prototypes live in the flattened feature space of size prod(shape); larger `noise` makes the
  task harder. Labels are balanced (counts differ by at most 1) and shuffled.
  """
  del data_dir
  shape = tuple(int(s) for s in np.atleast_1d(shape))
  if num_train < 1 or num_test < 1 or num_classes < 2 or not shape or min(shape) < 1 or noise < 0:
    raise ValueError('synthetic needs num_train >= 1, num_test >= 1, num_classes >= 2, '
                     f'a non-empty positive shape and noise >= 0, got {num_train}, {num_test}, '
                     f'{num_classes}, {shape}, {noise}.')
  rng = np.random.default_rng(seed)
  prototypes = rng.normal(size=(num_classes, int(np.prod(shape))))

  def sample(n):
    y = rng.permutation(np.arange(n) % num_classes).astype(np.int32)
    x = prototypes[y] + noise * rng.normal(size=(n, prototypes.shape[1]))
    return x.astype(np.float32).reshape((n, *shape)), y

  x_train, y_train = sample(num_train)
  x_test, y_test = sample(num_test)
  return ArrayDataset('synthetic', x_train, y_train, x_test, y_test, num_classes=num_classes)


def _import_tf(name: str, otherwise: str = ''):
  """(tensorflow, tensorflow_datasets), with TensorFlow kept off accelerators."""
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  try:
    import tensorflow as tf
    import tensorflow_datasets as tfds
  except ImportError as e:
    raise ValueError(f'Dataset {name!r} needs TensorFlow: pip install -e ".[tfds]" '
                     f'({e}){otherwise}.') from e
  try:  # Keep TensorFlow off accelerators so JAX keeps their memory.
    tf.config.set_visible_devices([], 'GPU')
  except RuntimeError:
    pass  # TF was already initialised by the caller; its device choice stands.
  return tf, tfds


def _not_prepared_errors(tf, tfds) -> tuple[type[Exception], ...]:
  """What TFDS raises for a set that is not prepared in its data_dir."""
  return (AssertionError, FileNotFoundError, tfds.core.DatasetNotFoundError,
          tf.errors.NotFoundError)


def _read_tfds(name: str, tfds_name: str, data_dir: str | None, *, label_key: str = 'label',
               otherwise: str = '') -> ArrayDataset:
  """Reads a prepared TFDS image-classification set into memory; never downloads.

  `label_key` is the TFDS feature used as the label; `otherwise` ends the errors with the other
  way to provide the data.
  """
  tf, tfds = _import_tf(name, otherwise)
  where = data_dir or tfds.core.constants.DATA_DIR
  absl_logger = logging.getLogger('absl')
  level = absl_logger.level
  absl_logger.setLevel(logging.ERROR)  # our error below says it all, once
  try:
    builder = tfds.builder(tfds_name, data_dir=data_dir)
    splits = tfds.load(tfds_name, split=['train', 'test'], data_dir=data_dir, download=False)
  except _not_prepared_errors(tf, tfds) as e:
    raise ValueError(
        f'Dataset {tfds_name!r} is not prepared under data_dir={where}: download it on a networked '
        f'machine with `python -c "import tensorflow_datasets as tfds; '
        f"tfds.builder('{tfds_name}', data_dir='{where}').download_and_prepare()\"` "
        f'and pass --config.data_dir={where}{otherwise}.') from e
  finally:
    absl_logger.setLevel(level)
  arrays = []
  for ds in splits:
    # One batch of the whole split. Not `batch_size=-1`: that sizes the batch from the stored
    # split metadata, which TFDS mock data lacks; the dataset cardinality is always known here.
    ds = ds.map(lambda example: (example['image'], example[label_key]))
    x, y = tfds.as_numpy(ds.batch(int(ds.cardinality())).get_single_element())
    x = x.astype(np.float32)
    x *= np.float32(1 / 255)
    arrays += [x, y.astype(np.int32)]
  num_classes = builder.info.features[label_key].num_classes
  return ArrayDataset(name, *arrays, num_classes=num_classes)


def _files_or_tfds(name: str, data_dir: str | None, raw: files.Idx | files.CifarPickles,
                   num_classes: int, origin: str, *, tfds_name: str | None = None,
                   label_key: str = 'label') -> ArrayDataset:
  """The raw files `raw` in `data_dir` if any of them is there, else TFDS's prepared set.

  Args:
    name: dataset name.
    data_dir: directory of the raw files or of TFDS's prepared data (None: TFDS's default).
    raw: the distribution files' reader.
    num_classes: the label count (TFDS's for the same set).
    origin: where the raw files come from, for the error messages.
    tfds_name: TFDS's name of the set (default `name`).
    label_key: TFDS's label feature.
  """
  tfds_name = tfds_name or name
  files_text = f'{raw.describe()} ({origin})'
  if data_dir:
    data_dir = os.path.expanduser(data_dir)
    if not os.path.isdir(data_dir):
      raise ValueError(f'Dataset {name!r}: data_dir={data_dir} does not exist; put {files_text} '
                       f'there, or prepare TFDS\'s {tfds_name!r} there, and pass '
                       '--config.data_dir=DIR.')
    if raw.present(data_dir):
      return ArrayDataset(name, *raw.read(data_dir, num_classes), num_classes=num_classes)
  return _read_tfds(name, tfds_name, data_dir, label_key=label_key,
                    otherwise=f'; or put {files_text} in a directory DIR and pass '
                              '--config.data_dir=DIR')


_ORIGINS = {
    'mnist': 'from yann.lecun.com/exdb/mnist',
    'fashion_mnist': ('from github.com/zalandoresearch/fashion-mnist; on Debian '
                      '`apt-get install dataset-fashion-mnist` puts them in '
                      '/usr/share/datasets/fashion-mnist'),
    'emnist': "the gzip/ folder of NIST's EMNIST gzip.zip",
    'cifar10': 'cifar-10-python.tar.gz from www.cs.toronto.edu/~kriz/cifar.html, extracted',
    'cifar100': 'cifar-100-python.tar.gz from www.cs.toronto.edu/~kriz/cifar.html, extracted',
}
# Label counts as TFDS gives them (EMNIST letters: labels 1..26 of 37, as NIST stores them).
_EMNIST_CLASSES = {'byclass': 62, 'bymerge': 47, 'balanced': 47, 'letters': 37, 'digits': 10,
                   'mnist': 10}
_CIFAR10 = files.CifarPickles('cifar-10-batches-py',
                              tuple(f'data_batch_{i}' for i in range(1, 6)), ('test_batch',),
                              'labels')
_CIFAR100_LABELS = {'fine': 100, 'coarse': 20}


def _load_mnist_like(name, *, data_dir, seed):
  """MNIST or Fashion-MNIST: [n, 28, 28, 1], 10 classes (`seed` is unused)."""
  del seed
  return _files_or_tfds(name, data_dir, files.Idx(), 10, _ORIGINS[name])


def _load_emnist(*, data_dir, seed, emnist_split='balanced'):
  """EMNIST `emnist_split`, [n, 28, 28, 1], turned upright.

  NIST stores every EMNIST image transposed (rows are the glyph's columns) and TFDS copies them
  as stored; both readers' images are transposed back here, so they share MNIST's orientation.
  """
  del seed
  if emnist_split not in _EMNIST_CLASSES:
    raise ValueError(f'Unknown emnist_split {emnist_split!r}; choose one of '
                     f'{", ".join(_EMNIST_CLASSES)}.')
  ds = _files_or_tfds('emnist', data_dir, files.Idx(f'emnist-{emnist_split}-'),
                      _EMNIST_CLASSES[emnist_split], _ORIGINS['emnist'],
                      tfds_name=f'emnist/{emnist_split}')
  upright = lambda x: np.ascontiguousarray(x.transpose(0, 2, 1, 3))
  return dataclasses.replace(ds, x_train=upright(ds.x_train), x_test=upright(ds.x_test))


def _load_cifar10(*, data_dir, seed):
  """CIFAR-10: [n, 32, 32, 3], 10 classes (`seed` is unused)."""
  del seed
  return _files_or_tfds('cifar10', data_dir, _CIFAR10, 10, _ORIGINS['cifar10'])


def _load_cifar100(*, data_dir, seed, cifar100_labels='fine'):
  """CIFAR-100: [n, 32, 32, 3] with the 100 fine labels or the 20 coarse superclasses."""
  del seed
  if cifar100_labels not in _CIFAR100_LABELS:
    raise ValueError(f"cifar100_labels must be 'fine' or 'coarse', got {cifar100_labels!r}.")
  raw = files.CifarPickles('cifar-100-python', ('train',), ('test',), f'{cifar100_labels}_labels')
  return _files_or_tfds('cifar100', data_dir, raw, _CIFAR100_LABELS[cifar100_labels],
                        _ORIGINS['cifar100'],
                        label_key='label' if cifar100_labels == 'fine' else 'coarse_label')


# ImageNet-1k (ILSVRC 2012) ------------------------------------------------------------------

IMAGENET_MEAN = (0.485, 0.456, 0.406)   # per RGB channel of [0, 1] pixels (torchvision's)
IMAGENET_STD = (0.229, 0.224, 0.225)
# Named class subsets for `classes`: 'tiny_imagenet' is the 200 wnids of Tiny ImageNet
# (cs231n's tiny-imagenet-200/wnids.txt, sorted), the ImageNet200 of Co-S²P's code.
CLASS_SUBSETS = {'tiny_imagenet': (
    'n01443537', 'n01629819', 'n01641577', 'n01644900', 'n01698640', 'n01742172', 'n01768244',
    'n01770393', 'n01774384', 'n01774750', 'n01784675', 'n01855672', 'n01882714', 'n01910747',
    'n01917289', 'n01944390', 'n01945685', 'n01950731', 'n01983481', 'n01984695', 'n02002724',
    'n02056570', 'n02058221', 'n02074367', 'n02085620', 'n02094433', 'n02099601', 'n02099712',
    'n02106662', 'n02113799', 'n02123045', 'n02123394', 'n02124075', 'n02125311', 'n02129165',
    'n02132136', 'n02165456', 'n02190166', 'n02206856', 'n02226429', 'n02231487', 'n02233338',
    'n02236044', 'n02268443', 'n02279972', 'n02281406', 'n02321529', 'n02364673', 'n02395406',
    'n02403003', 'n02410509', 'n02415577', 'n02423022', 'n02437312', 'n02480495', 'n02481823',
    'n02486410', 'n02504458', 'n02509815', 'n02666196', 'n02669723', 'n02699494', 'n02730930',
    'n02769748', 'n02788148', 'n02791270', 'n02793495', 'n02795169', 'n02802426', 'n02808440',
    'n02814533', 'n02814860', 'n02815834', 'n02823428', 'n02837789', 'n02841315', 'n02843684',
    'n02883205', 'n02892201', 'n02906734', 'n02909870', 'n02917067', 'n02927161', 'n02948072',
    'n02950826', 'n02963159', 'n02977058', 'n02988304', 'n02999410', 'n03014705', 'n03026506',
    'n03042490', 'n03085013', 'n03089624', 'n03100240', 'n03126707', 'n03160309', 'n03179701',
    'n03201208', 'n03250847', 'n03255030', 'n03355925', 'n03388043', 'n03393912', 'n03400231',
    'n03404251', 'n03424325', 'n03444034', 'n03447447', 'n03544143', 'n03584254', 'n03599486',
    'n03617480', 'n03637318', 'n03649909', 'n03662601', 'n03670208', 'n03706229', 'n03733131',
    'n03763968', 'n03770439', 'n03796401', 'n03804744', 'n03814639', 'n03837869', 'n03838899',
    'n03854065', 'n03891332', 'n03902125', 'n03930313', 'n03937543', 'n03970156', 'n03976657',
    'n03977966', 'n03980874', 'n03983396', 'n03992509', 'n04008634', 'n04023962', 'n04067472',
    'n04070727', 'n04074963', 'n04099969', 'n04118538', 'n04133789', 'n04146614', 'n04149813',
    'n04179913', 'n04251144', 'n04254777', 'n04259630', 'n04265275', 'n04275548', 'n04285008',
    'n04311004', 'n04328186', 'n04356056', 'n04366367', 'n04371430', 'n04376876', 'n04398044',
    'n04399382', 'n04417672', 'n04456115', 'n04465501', 'n04486054', 'n04487081', 'n04501370',
    'n04507155', 'n04532106', 'n04532670', 'n04540053', 'n04560804', 'n04562935', 'n04596742',
    'n04597913', 'n06596364', 'n07579787', 'n07583066', 'n07614500', 'n07615774', 'n07695742',
    'n07711569', 'n07715103', 'n07720875', 'n07734744', 'n07747607', 'n07749582', 'n07753592',
    'n07768694', 'n07871810', 'n07873807', 'n07875152', 'n07920052', 'n09193705', 'n09246464',
    'n09256479', 'n09332890', 'n09428293', 'n12267677',
)}
_IMAGENET_MANUAL = ('ImageNet cannot be downloaded by TFDS: on a machine with the files, put '
                    'ILSVRC2012_img_train.tar and ILSVRC2012_img_val.tar (image-net.org) in '
                    '{where}/downloads/manual and run `python -c "import tensorflow_datasets as '
                    "tfds; tfds.builder('imagenet2012', data_dir='{where}').download_and_prepare()"
                    '"`, then pass --config.data_dir={where}')


def imagenet_class_ids(names, *, num_classes=None, classes=None, class_seed=0) -> np.ndarray:
  """The chosen ImageNet class ids, sorted ascending (int64 [K]).

  Args:
    names: the 1000 wnids in label order (TFDS's `label` names).
    num_classes: K, a uniformly random subset drawn with `class_seed` (None: every class).
    classes: instead, the classes themselves: ids in [0, 1000), wnids ('n01443537'), or the
      name of a subset in `CLASS_SUBSETS` ('tiny_imagenet').
    class_seed: numpy seed of the random subset.
  """
  total = len(names)
  if classes is not None and num_classes is not None:
    raise ValueError('imagenet2012 takes num_classes (a random subset) or classes (given '
                     'ones), not both.')
  if classes is None:
    k = total if num_classes is None else num_classes
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= total:
      raise ValueError(f'num_classes must be an integer in [1, {total}], got {num_classes!r}.')
    if k == total:
      return np.arange(total)
    return np.sort(np.random.default_rng(class_seed).choice(total, int(k), replace=False))
  if isinstance(classes, str):
    if classes not in CLASS_SUBSETS:
      raise ValueError(f'Unknown class subset {classes!r}; known subsets: '
                       f'{", ".join(CLASS_SUBSETS)} (or give a list of ids or wnids).')
    classes = CLASS_SUBSETS[classes]
  index = {name: i for i, name in enumerate(names)}
  ids = []
  for c in (classes if isinstance(classes, (list, tuple, np.ndarray)) else [classes]):
    if isinstance(c, str) and c in index:
      ids.append(index[c])
    elif (isinstance(c, (int, np.integer)) and not isinstance(c, bool)
          and 0 <= c < total):
      ids.append(int(c))
    else:
      raise ValueError(f'classes must list ImageNet class ids in [0, {total}) or wnids such '
                       f'as {names[0]!r}, got {c!r}.')
  if not ids or len(set(ids)) != len(ids):
    raise ValueError(f'classes must be a non-empty list without repeats, got {len(ids)} '
                     f'entries of which {len(set(ids))} distinct.')
  return np.sort(np.asarray(ids, np.int64))


def _read_imagenet_split(tf, tfds, ds, remap: np.ndarray, image_size: int):
  """(x float32 [n, S, S, 3] ImageNet-normalised, y int32 [n]) of the kept classes.

  Examples of other classes are dropped before their JPEG is decoded. Each kept image is
  decoded, resized to S × S (bilinear, antialiased; the aspect ratio is not kept) and rounded
  to uint8, as torchvision's Resize of a PIL image gives; the uint8 batches (¼ of the final
  size) become the float32 array one batch at a time, so the peak is 1.25 × the result.
  """
  table = tf.constant(remap, tf.int32)

  def keep(example):
    return tf.gather(table, tf.cast(example['label'], tf.int32)) >= 0

  def decode(example):
    image = tf.io.decode_image(example['image'], channels=3, expand_animations=False)
    image = tf.image.resize(image, (image_size, image_size), method='bilinear', antialias=True)
    image = tf.cast(tf.clip_by_value(tf.round(image), 0, 255), tf.uint8)
    return image, tf.gather(table, tf.cast(example['label'], tf.int32))

  ds = ds.filter(keep).map(decode, num_parallel_calls=tf.data.AUTOTUNE)
  chunks = list(tfds.as_numpy(ds.batch(512).prefetch(2)))
  n = sum(len(labels) for _, labels in chunks)
  x = np.empty((n, image_size, image_size, 3), np.float32)
  y = np.empty(n, np.int32)
  scale = 1 / (255 * np.asarray(IMAGENET_STD, np.float32))
  shift = np.asarray(IMAGENET_MEAN, np.float32) / np.asarray(IMAGENET_STD, np.float32)
  start = 0
  for images, labels in chunks:
    stop = start + len(labels)
    np.multiply(images, scale, out=x[start:stop])
    x[start:stop] -= shift
    y[start:stop] = labels
    start = stop
  chunks.clear()
  return x, y


def _load_imagenet2012(*, data_dir, seed, num_classes=None, classes=None, class_seed=0,
                       image_size=224):
  """ImageNet-1k from TFDS's prepared `imagenet2012`, a class subset at S × S (`seed` unused).

  The train split is the client pool and the validation split (50 images a class) the test
  set, both restricted to the chosen classes (`imagenet_class_ids`: `num_classes` drawn with
  `class_seed`, or `classes`), labels remapped to 0..K−1 in ascending original id. Images
  are resized to `image_size` (Co-S²P: 224) and normalised with ImageNet's per-channel
  mean/std (`IMAGENET_MEAN`, `IMAGENET_STD`), with no augmentation, as the paper's code does.

  Memory: the arrays are float32 in host memory, n · S² · 3 · 4 bytes (602 KB an image at
  224): ImageNet200 (Tiny ImageNet's classes, ≈ 260k train + 10k validation images) ≈ 163 GB,
  ImageNet300 ≈ 240 GB at 224; ≈ 41 / 60 GB at 112 and 13 / 20 GB at 64. Loading peaks at
  1.25 × that, and `build_federated` packs a padded per-client copy of the pool on top (the
  engine places that copy on the accelerator). uint8 storage is not offered: `pack_clients`
  casts the features to float32 and the models read them as given, so the normalisation would
  have to move into the compiled step.
  """
  del seed
  if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < 1:
    raise ValueError(f'image_size must be a positive integer, got {image_size!r}.')
  if data_dir:
    data_dir = os.path.expanduser(data_dir)
    if not os.path.isdir(data_dir):
      raise ValueError(f'Dataset \'imagenet2012\': data_dir={data_dir} does not exist; '
                       + _IMAGENET_MANUAL.format(where=data_dir) + '.')
  tf, tfds = _import_tf('imagenet2012')
  where = data_dir or tfds.core.constants.DATA_DIR
  absl_logger = logging.getLogger('absl')
  level = absl_logger.level
  absl_logger.setLevel(logging.ERROR)
  try:
    builder = tfds.builder('imagenet2012', data_dir=data_dir)
    names = builder.info.features['label'].names
    ids = imagenet_class_ids(names, num_classes=num_classes, classes=classes,
                             class_seed=class_seed)
    splits = [builder.as_dataset(split=split, shuffle_files=False,
                                 decoders={'image': tfds.decode.SkipDecoding()})
              for split in ('train', 'validation')]
  except _not_prepared_errors(tf, tfds) as e:
    raise ValueError(f'Dataset \'imagenet2012\' is not prepared under data_dir={where}; '
                     + _IMAGENET_MANUAL.format(where=where) + '.') from e
  finally:
    absl_logger.setLevel(level)
  remap = np.full(len(names), -1, np.int32)
  remap[ids] = np.arange(len(ids))
  arrays = []
  for split, ds in zip(('train', 'validation'), splits):
    x, y = _read_imagenet_split(tf, tfds, ds, remap, image_size)
    if not len(y):
      raise ValueError(f'imagenet2012 {split} under data_dir={where} holds no image of the '
                       f'{len(ids)} chosen classes.')
    arrays += [x, y]
  return ArrayDataset('imagenet2012', *arrays, num_classes=len(ids))


_LOADERS = {
    'digits': _load_digits,
    'synthetic': _load_synthetic,
    'mnist': functools.partial(_load_mnist_like, 'mnist'),
    'fashion_mnist': functools.partial(_load_mnist_like, 'fashion_mnist'),
    'emnist': _load_emnist,
    'cifar10': _load_cifar10,
    'cifar100': _load_cifar100,
    'imagenet2012': _load_imagenet2012,
}
DATASETS = tuple(_LOADERS)


def _standardize(ds: ArrayDataset) -> ArrayDataset:
  """Per-channel (last axis) standardisation with train mean/std, applied to train and test."""
  axes = tuple(range(ds.x_train.ndim - 1))
  mean = ds.x_train.mean(axis=axes, dtype=np.float64)
  std = np.maximum(ds.x_train.std(axis=axes, dtype=np.float64), 1e-8)
  scale = lambda x: ((x - mean) / std).astype(np.float32)
  return dataclasses.replace(ds, x_train=scale(ds.x_train), x_test=scale(ds.x_test))


def option_defaults(name: str) -> dict:
  """The options dataset `name` takes (`load_dataset`'s **options and
  `normalize`), each with its default."""
  parameters = inspect.signature(_LOADERS[name]).parameters.values()
  return {'normalize': False, **{p.name: p.default for p in parameters
                                 if p.default is not inspect.Parameter.empty}}


def load_dataset(name: str, *, data_dir: str | None = None, seed: int = 0,
                 normalize: bool = False, **options) -> ArrayDataset:
  """Loads dataset `name` (one of `DATASETS`) into host memory.

  Args:
    name: 'digits', 'synthetic', 'mnist', 'fashion_mnist', 'emnist', 'cifar10', 'cifar100' or
      'imagenet2012'.
    data_dir: directory holding the real set's distribution files or TFDS's prepared data (see
      the module docstring for the order; None = TFDS's default directory).
    seed: seed of the digits train/test split and of the synthetic generator.
    normalize: standardise each channel with the train mean/std instead of keeping [0, 1].
    **options: per-dataset options: digits `test_fraction`; synthetic `num_train`, `num_test`,
      `shape`, `num_classes`, `noise`; emnist `emnist_split`; cifar100 `cifar100_labels`
      ('fine' or 'coarse'); imagenet2012 `num_classes`, `classes`, `class_seed`, `image_size`
      (`_load_imagenet2012`).

  Returns:
    An `ArrayDataset` with float32 features [n, *feature_shape] and int32 labels [n].

  Raises:
    ValueError: unknown name or option, bad option value, a missing `data_dir`, raw files that
      are incomplete or corrupt, or a real set found neither as raw files nor prepared by TFDS.
  """
  if name not in _LOADERS:
    raise ValueError(f'Unknown dataset {name!r}; known datasets: {", ".join(DATASETS)}.')
  loader = _LOADERS[name]
  valid = [p for p in inspect.signature(loader).parameters if p not in ('data_dir', 'seed')]
  unknown = sorted(set(options) - set(valid))
  if unknown:
    raise ValueError(f'Unknown option(s) {unknown} for dataset {name!r}; valid options: '
                     f'{sorted(valid + ["normalize"])}.')
  ds = loader(data_dir=data_dir, seed=seed, **options)
  return _standardize(ds) if normalize else ds
