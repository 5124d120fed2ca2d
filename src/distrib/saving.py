"""``distrib.saving``: what `distrib.models.load_model` may rebuild (Keras's ``keras.saving`` spelling).

Register the module classes (or builder functions) of your package so a
saved model naming them loads back anywhere the package is imported::

    @distrib.saving.register_serializable(package="my_models")
    class Block(torch.nn.Module):
        def __init__(self, width=4):
            super().__init__()
            self.fc = torch.nn.Linear(width, width)

        def get_config(self):          # the constructor arguments, as JSON
            return {"width": self.fc.in_features}

See `distrib.training.saving.registry` for the trust model: a file's names only ever
build ``torch.nn.Module`` subclasses or call registered / given functions.
"""
from distrib.saved_model.options import LoadOptions, SaveOptions
from distrib.training.model_load import load_model
from distrib.training.saving.model_save import save_model
from distrib.training.saving.registry import get_registered_name, get_registered_object, register_serializable

__all__ = ["register_serializable", "get_registered_name", "get_registered_object", "load_model",
           "save_model", "SaveOptions", "LoadOptions"]
