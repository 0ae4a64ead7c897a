"""A stand-in for torch whose CUDA is initialised at import (as a preload that touches the GPU
leaves it): the fork server's check must refuse to fork. Only on the test's PYTHONPATH."""


class cuda:  # noqa: N801  (torch.cuda)
    @staticmethod
    def is_initialized():
        return True
