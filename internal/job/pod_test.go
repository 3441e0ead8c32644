package job

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/cmdline"
)

func TestPodMaster(t *testing.T) {
	kubeflow := func(rank string) map[string]string {
		return map[string]string{"PET_NNODES": "2", "PET_NODE_RANK": rank,
			"PET_MASTER_ADDR": "job-node-0-0.job", "PET_MASTER_PORT": "29501"}
	}
	here := func(host string) bool { return host == "me" }
	for _, tc := range []struct {
		name     string
		args     []string
		env      map[string]string
		wantAddr string // "" means nothing to probe
		wantFrom string
		wantWait time.Duration
	}{
		{"node 0 holds the store", nil, kubeflow("0"), "", "", 0},
		{"node 1 probes PET_MASTER_ADDR:PET_MASTER_PORT", nil, kubeflow("1"),
			"job-node-0-0.job:29501", "PET_MASTER_ADDR, PET_MASTER_PORT", 0},
		{"argv wins over PET_*", []string{"--master-addr", "10.0.0.5", "--master-port", "29600"}, kubeflow("1"),
			"10.0.0.5:29600", "--master-addr, --master-port", 0},
		{"torchrun's defaults", []string{"--nnodes", "2", "--node-rank", "1"}, nil,
			"127.0.0.1:29500", "torchrun's default --master-addr, torchrun's default --master-port", 0},
		{"a static endpoint wins over the master address", []string{"--rdzv-endpoint", "store:29700"}, kubeflow("1"),
			"store:29700", "--rdzv-endpoint", 0},
		{"c10d on another node", []string{"--rdzv-backend", "c10d", "--rdzv-endpoint", "job-0:29400"}, map[string]string{"PET_NNODES": "2"},
			"job-0:29400", "--rdzv-endpoint", 0},
		{"c10d: the default port", nil, map[string]string{"PET_NNODES": "2", "PET_RDZV_BACKEND": "c10d", "PET_RDZV_ENDPOINT": "job-0"},
			"job-0:29400", "PET_RDZV_ENDPOINT", 0},
		{"c10d on this node holds the store", []string{"--rdzv-backend", "c10d", "--rdzv-endpoint", "me:29400"}, map[string]string{"PET_NNODES": "2"},
			"", "", 0},
		{"c10d IPv6", []string{"--rdzv-backend", "c10d", "--rdzv-endpoint", "[fd00::1]:29400"}, map[string]string{"PET_NNODES": "2"},
			"[fd00::1]:29400", "--rdzv-endpoint", 0},
		{"etcd is not probed", []string{"--rdzv-backend", "etcd", "--rdzv-endpoint", "etcd:2379"}, map[string]string{"PET_NNODES": "2"},
			"", "", 0},
		{"the test hook shortens the wait", nil, func() map[string]string {
			m := kubeflow("1")
			m[MasterWaitHook] = "1.5"
			return m
		}(), "job-node-0-0.job:29501", "PET_MASTER_ADDR, PET_MASTER_PORT", 1500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, err := cmdline.Parse(append(append([]string{}, tc.args...), "x.py"), env(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			p, ok := podMaster(cl, env(tc.env), here)
			if ok != (tc.wantAddr != "") {
				t.Fatalf("podMaster = %+v, %v; want %q", p, ok, tc.wantAddr)
			}
			if p.Addr != tc.wantAddr || p.From != tc.wantFrom || p.Wait != tc.wantWait {
				t.Errorf("podMaster = %+v, want addr %q from %q wait %v", p, tc.wantAddr, tc.wantFrom, tc.wantWait)
			}
		})
	}
}

func TestPodLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want []string
	}{
		{"Kubeflow's two nodes", nil, map[string]string{"PET_NNODES": "2", "PET_NODE_RANK": "1",
			"PET_MASTER_ADDR": "job-node-0-0.job", "PET_MASTER_PORT": "29500"},
			[]string{"gorun: runs per pod: torchrun on this node only, as node 1 of 2 (PET_NODE_RANK), master job-node-0-0.job:29500 (PET_MASTER_ADDR)",
				"the other node runs its own gorun, outside this one's reach"}},
		{"four nodes on argv", []string{"--nnodes", "4", "--node-rank", "3", "--master-addr", "10.0.0.1"}, nil,
			[]string{"node 3 of 4 (--node-rank), master 10.0.0.1:29500 (--master-addr)", "the other nodes run their own gorun"}},
		{"c10d elastic", []string{"--nnodes", "2:4", "--rdzv-backend", "c10d", "--rdzv-endpoint", "job-0:29400"}, nil,
			[]string{"one of 2 to 4 nodes, ranked by the c10d rendezvous at job-0:29400", "the other nodes run their own gorun"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, err := cmdline.Parse(append(append([]string{}, tc.args...), "x.py"), env(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			got := podLine(cl)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("podLine = %q\nwant it to contain %q", got, w)
				}
			}
			if strings.Contains(got, "\n") {
				t.Errorf("podLine is more than one line: %q", got)
			}
		})
	}
}

func TestThisMachine(t *testing.T) {
	ctx := context.Background()
	name, _ := os.Hostname()
	for host, want := range map[string]bool{
		"localhost": true, "127.0.0.1": true, "::1": true, name: true,
		"192.0.2.1":            false, // TEST-NET-1: no interface of a test machine
		"no-such-host.invalid": false,
	} {
		if got := thisMachine(ctx, host); got != want {
			t.Errorf("thisMachine(%q) = %v, want %v", host, got, want)
		}
	}
}
