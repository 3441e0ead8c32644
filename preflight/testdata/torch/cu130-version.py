from typing import Optional

__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'xpu']
__version__ = '2.11.0+cu130'
debug = False
cuda: Optional[str] = '13.0'
git_version = '70d99e998b2a8e5b4ab7fd1ab3eb5b3bd1e8e9b3'
hip: Optional[str] = None
xpu: Optional[str] = None
