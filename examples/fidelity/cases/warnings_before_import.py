# Turns every warning into an error before `import torch`: under torchrun
# the filters torch installs as it is imported come first and keep the
# warnings it silences silent; in a pooled worker the script's filter
# would come first; gorun starts it cold.
import warnings

warnings.simplefilter("error")

import torch  # noqa: E402

import record  # noqa: E402

record.write({"warnings.filters": [[a, getattr(m, "pattern", m), c.__name__] for a, m, c, _, _ in warnings.filters], "torch": torch.__name__})
