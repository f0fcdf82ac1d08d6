"""tilepy.models.data: a DataLoader with seeded shuffling, data sets that ship inside
installed packages (scikit-learn's digits, iris, wine, breast cancer; the Python
documentation as a character corpus) and seeded synthetic generators. Nothing is fetched.
"""

from tilepy.models.data.datasets import CharDataset, Split, char_corpus, load, python_docs_text
from tilepy.models.data.loader import DataLoader, TensorDataset, train_test_split
from tilepy.models.data.synthetic import click_logs, random_graph, sequence_task, shapes_images

__all__ = [
    "CharDataset", "DataLoader", "Split", "TensorDataset", "char_corpus", "click_logs", "load",
    "python_docs_text", "random_graph", "sequence_task", "shapes_images", "train_test_split",
]
