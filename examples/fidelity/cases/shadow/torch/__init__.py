# A stand-in torch for cases/syspath_before_import.py.
STAND_IN = True
