package cmdline

import (
	"fmt"
	"strings"

	"github.com/gorun/gorun/internal/lazyre"
	"github.com/gorun/gorun/internal/userr"
)

var envKey = lazyre.New(`^[A-Za-z_][A-Za-z0-9_]*$`)

// checkEnvFlag checks one --env value, at where ("--env (argument 3)").
// Nothing after the first '=' is ever shown: the value may be a secret.
func checkEnvFlag(where, value string) error {
	key, _, ok := strings.Cut(value, "=")
	if !envKey().MatchString(key) {
		problem := fmt.Sprintf("expected NAME or NAME=VALUE, and %s is not a valid variable name", userr.Quote(key))
		if !ok {
			problem = "expected NAME or NAME=VALUE, and this is not a variable name (it is not shown: it may be a secret)"
		}
		return &userr.InputError{
			Where:   where,
			Problem: problem,
			Fix:     "write --env NAME (its value from this shell's environment, never shown) or --env NAME=VALUE; NAME is letters, digits and '_', not starting with a digit",
		}
	}
	if fix, set := torchrunWorkerVar(key); set {
		return &userr.InputError{
			Where:   where,
			Problem: fmt.Sprintf("torchrun sets %s for every worker itself, over any value given here", key),
			Fix:     fix,
		}
	}
	return nil
}

// torchrunWorkerVar reports whether torchrun 2.11 sets the variable for
// every worker, replacing what the environment holds, and how to change it
// instead. The list is torchrun's own: the local elastic agent's worker
// environment (LocalElasticAgent._start_workers), TORCHELASTIC_ERROR_FILE
// from the log specs, and TORCHELASTIC_SIGNALS_TO_HANDLE from
// launcher/api.py. Variables torchrun only defaults
// (TORCH_NCCL_ASYNC_ERROR_HANDLING, OMP_NUM_THREADS) or reads
// (TORCHELASTIC_ENABLE_FILE_TIMER, TORCHELASTIC_TIMER_FILE,
// TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE) are the user's to set.
func torchrunWorkerVar(name string) (fix string, set bool) {
	const ranks = "ranks and sizes follow the rendezvous: use --nnodes, --nproc-per-node and the host list"
	switch name {
	case "MASTER_ADDR":
		return "use --master-addr (or --rdzv-endpoint)", true
	case "MASTER_PORT":
		return "use --master-port (or --rdzv-endpoint)", true
	case "RANK", "WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE":
		return ranks, true
	case "LOCAL_RANK", "LOCAL_WORLD_SIZE":
		return "use --nproc-per-node, or --include/--exclude or CUDA_VISIBLE_DEVICES to pick GPUs", true
	case "ROLE_NAME":
		return "use --role", true
	case "TORCHELASTIC_RESTART_COUNT":
		return "gorun sets it to the attempt number; use --max-restarts", true
	case "TORCHELASTIC_MAX_RESTARTS":
		return "use --max-restarts", true
	case "TORCHELASTIC_RUN_ID":
		return "use --rdzv-id", true
	case "TORCHELASTIC_USE_AGENT_STORE":
		return "torchrun decides it from the rendezvous backend; use --rdzv-backend", true
	case "TORCHELASTIC_ERROR_FILE":
		return "torchrun points it at each worker's own error file; use --log-dir to choose where", true
	case "TORCHELASTIC_SIGNALS_TO_HANDLE":
		return "use --signals-to-handle", true
	}
	return "", false
}
