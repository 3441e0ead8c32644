package job

import (
	"reflect"
	"testing"

	"github.com/gorun/gorun/cmdline"
)

// TestHelpOptions reads the options of torchrun's argparse --help: every
// long spelling, whether it takes a value (a metavar or a choice list),
// and nothing of the descriptions.
func TestHelpOptions(t *testing.T) {
	help := `usage: torchrun [-h] [--nnodes NNODES] [--standalone] training_script ...

options:
  -h, --help            show this help message and exit
  --nnodes NNODES       Number of nodes, or the range of nodes in form
                        <minimum_nodes>:<maximum_nodes>.
  --standalone          Start a local standalone rendezvous backend
  --numa-binding {node,socket,exclusive}, --numa_binding {node,socket,exclusive}
                        If provided, we will affinitize the worker processes
  --shutdown-timeout SHUTDOWN_TIMEOUT, --shutdown_timeout SHUTDOWN_TIMEOUT
                        Seconds to wait after SIGTERM --not-an-option here.
`
	got := helpOptions(help)
	want := map[string]cmdline.Extra{
		"--help":             {Names: []string{"--help"}},
		"--nnodes":           {Names: []string{"--nnodes"}, Value: true},
		"--standalone":       {Names: []string{"--standalone"}},
		"--numa-binding":     {Names: []string{"--numa-binding", "--numa_binding"}, Value: true},
		"--numa_binding":     {Names: []string{"--numa-binding", "--numa_binding"}, Value: true},
		"--shutdown-timeout": {Names: []string{"--shutdown-timeout", "--shutdown_timeout"}, Value: true},
		"--shutdown_timeout": {Names: []string{"--shutdown-timeout", "--shutdown_timeout"}, Value: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("helpOptions:\n got %v\nwant %v", got, want)
	}
}
