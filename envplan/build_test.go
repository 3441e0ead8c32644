package envplan

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/hosts"
	"github.com/gorun/gorun/internal/userr"
	"github.com/gorun/gorun/internal/wire"
)

// hasNote reports whether some note of the level contains every fragment.
func hasNote(p Plan, level string, fragments ...string) bool {
	for _, n := range p.Notes {
		if n.Level != level {
			continue
		}
		ok := true
		for _, f := range fragments {
			ok = ok && strings.Contains(n.Message, f)
		}
		if ok {
			return true
		}
	}
	return false
}

func argvHas(argv []string, word string) bool { return slices.Contains(argv, word) }

func argvHasPrefix(argv []string, prefix string) bool {
	return slices.ContainsFunc(argv, func(a string) bool { return strings.HasPrefix(a, prefix) })
}

func ranksOf(n NodePlan) []int {
	var r []int
	for _, rp := range n.Ranks {
		r = append(r, rp.Rank)
	}
	return r
}

func TestBuildInputErrors(t *testing.T) {
	tests := []struct {
		name  string
		spec  func() Spec
		where string
	}{
		{"standalone with two hosts", func() Spec {
			s := newSpec([]string{"--standalone"}, "train.py")
			s.Hosts = testHosts("a,b")
			return s
		}, "--standalone"},
		{"nnodes differs from hosts", func() Spec {
			s := newSpec([]string{"--nnodes=3"}, "train.py")
			s.Hosts = testHosts("a,b")
			return s
		}, "--nnodes"},
		{"static range below the hosts", func() Spec {
			s := newSpec([]string{"--nnodes=1:2"}, "train.py")
			s.Hosts = testHosts("a,b,c")
			return s
		}, "--nnodes"},
		{"elastic minimum above hosts", func() Spec {
			s := newSpec([]string{"--nnodes=3:4", "--rdzv_backend=c10d", "--rdzv_endpoint=a:29400"}, "train.py")
			s.Hosts = testHosts("a,b")
			return s
		}, "--nnodes"},
		{"no script", func() Spec {
			s := newSpec(nil, "train.py")
			s.Torchrun.TrainingScript = "" // a Spec made by hand, not by the parser
			return s
		}, "training_script"},
		{"mixed slot counts", func() Spec {
			s := newSpec(nil, "train.py")
			s.Hosts = testHosts("a:8,b")
			return s
		}, "the host list"},
		{"env NAME not set on the head", func() Spec {
			s := newSpec(nil, "train.py")
			s.Gorun.Env = []string{"NOVALUE"}
			return s
		}, "--env NOVALUE"},
		{"env bad name", func() Spec {
			s := newSpec(nil, "train.py")
			s.Gorun.Env = []string{"1X=secret-token"}
			return s
		}, "--env"},
		{"node rank beyond --nnodes in local mode", func() Spec {
			return newSpec([]string{"--node-rank=5", "--nnodes=2"}, "train.py")
		}, "--node-rank"},
		{"node rank equal to --nnodes", func() Spec {
			return newSpec([]string{"--node-rank=2", "--nnodes=2"}, "train.py")
		}, "--node-rank"},
		{"node rank against the maximum of a range", func() Spec {
			return newSpec([]string{"--nnodes=1:4", "--node_rank=4"}, "train.py")
		}, "--node-rank"},
		{"node rank without --nnodes", func() Spec {
			return newSpec([]string{"--node-rank=1"}, "train.py")
		}, "--node-rank"},
		{"node rank from PET_", func() Spec {
			env := map[string]string{"PET_NODE_RANK": "3", "PET_NNODES": "2"}
			cl, err := cmdline.ParseWith([]string{"train.py"}, func(k string) string { return env[k] }, nil)
			if err != nil {
				panic(err)
			}
			return Spec{CommandLine: cl}
		}, "PET_NODE_RANK"},
		{"c10d endpoint port 0 with several hosts", func() Spec {
			s := newSpec([]string{"--rdzv-backend=c10d", "--rdzv-endpoint=node1:0"}, "train.py")
			s.Hosts = testHosts("node1,node2")
			return s
		}, "--rdzv-endpoint"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Build(tt.spec(), nil)
			var ie *userr.InputError
			if !errors.As(err, &ie) {
				t.Fatalf("Build error = %v, want *userr.InputError", err)
			}
			if ie.Where != tt.where || ie.Fix == "" {
				t.Errorf("userr.InputError = %+v, want Where %q and a fix", ie, tt.where)
			}
			if strings.Contains(err.Error(), "secret-token") {
				t.Errorf("error shows the --env value: %v", err)
			}
		})
	}
}

func TestBuild(t *testing.T) {
	twoNodes := Facts{"a": smallFacts(2, "eth0", "10.0.0.1"), "b": smallFacts(2, "eth1", "10.0.0.2")}
	tests := []struct {
		name  string
		spec  func() Spec
		facts Facts
		check func(t *testing.T, p Plan)
	}{
		{"local mode passes options as given", func() Spec {
			s := newSpec([]string{"--nproc_per_node=4", "--max_restarts=2", "--rdzv_id=x"}, "train.py", "--x")
			s.Given = append(s.Given, cmdline.Arg{Name: "--monitor-interval", Dest: "monitor_interval", Value: "1", FromEnv: true})
			return s
		}, nil, func(t *testing.T, p Plan) {
			// PET_MONITOR_INTERVAL is the user's: torchrun reads it, gorun adds no --monitor_interval
			want := []string{"torchrun", "--nproc_per_node=4", "--rdzv_id=x", "--max_restarts=0", "--no_python", wire.SelfArg, "_rank", "--", "train.py", "--x"}
			if !slices.Equal(p.Nodes[0].Command, want) {
				t.Errorf("command = %q, want %q", p.Nodes[0].Command, want)
			}
			if p.Nodes[0].Host != "localhost" || len(p.Nodes) != 1 {
				t.Errorf("nodes = %+v, want one localhost", p.Nodes)
			}
			if got := ranksOf(p.Nodes[0]); !slices.Equal(got, []int{0, 1, 2, 3}) {
				t.Errorf("ranks = %v", got)
			}
			if v := p.Nodes[0].Env["OMP_NUM_THREADS"]; v.Value != "1" || v.Source != SourceTorchrun {
				t.Errorf("OMP_NUM_THREADS = %+v, want torchrun's 1", v)
			}
			if hasNote(p, NotePending) {
				t.Errorf("local mode has pending notes: %+v", p.Notes)
			}
		}},
		{"local mode second node of a static job", func() Spec {
			return newSpec([]string{"--nnodes=2", "--node_rank=1", "--nproc_per_node=4"}, "train.py")
		}, nil, func(t *testing.T, p Plan) {
			if got := ranksOf(p.Nodes[0]); !slices.Equal(got, []int{4, 5, 6, 7}) {
				t.Errorf("ranks = %v, want 4-7", got)
			}
			if p.Nodes[0].NodeRank != 1 {
				t.Errorf("node rank = %d", p.Nodes[0].NodeRank)
			}
		}},
		{"static head node decides per node", func() Spec {
			s := newSpec([]string{"--nnodes=2", "--max_restarts=5", "--node_rank=3"}, "train.py", "--lr", "1")
			s.Hosts = testHosts("a:2,b:2")
			return s
		}, twoNodes, func(t *testing.T, p Plan) {
			want := []string{"torchrun", "--nnodes=2", "--nproc_per_node=2", "--node_rank=1",
				"--master_addr=10.0.0.1", "--master_port=29500", "--max_restarts=0", "--monitor_interval=0.1",
				"--no_python", testGorun, "_rank", "--", "train.py", "--lr", "1"}
			if !slices.Equal(p.Nodes[1].Command, want) {
				t.Errorf("command = %q,\nwant %q", p.Nodes[1].Command, want)
			}
			if got := ranksOf(p.Nodes[1]); !slices.Equal(got, []int{2, 3}) {
				t.Errorf("ranks = %v", got)
			}
			if !hasNote(p, NoteInfo, "--max-restarts=5") || !hasNote(p, NoteWarn, "--node-rank=3") {
				t.Errorf("notes lack restarts/node-rank: %+v", p.Notes)
			}
			if p.Config.MaxRestarts != 5 || p.Config.MasterAddr != "10.0.0.1" {
				t.Errorf("config = %+v", p.Config)
			}
			e := p.Nodes[1].Env
			if e["NCCL_SOCKET_IFNAME"].Value != "=eth1" || e["GLOO_SOCKET_IFNAME"].Value != "eth1" {
				t.Errorf("interfaces = %+v / %+v", e["NCCL_SOCKET_IFNAME"], e["GLOO_SOCKET_IFNAME"])
			}
			if e["MASTER_ADDR"].Value != "10.0.0.1" || e["MASTER_ADDR"].Source != SourceTorchrun {
				t.Errorf("MASTER_ADDR = %+v", e["MASTER_ADDR"])
			}
			if e["OMP_NUM_THREADS"].Value != "8" || e["OMP_NUM_THREADS"].Source != SourceGorun {
				t.Errorf("OMP_NUM_THREADS = %+v", e["OMP_NUM_THREADS"])
			}
		}},
		{"user master address wins", func() Spec {
			s := newSpec([]string{"--master_addr=10.9.9.9", "--master_port=1234"}, "train.py")
			s.Hosts = testHosts("a,b")
			return s
		}, twoNodes, func(t *testing.T, p Plan) {
			for _, n := range p.Nodes {
				if !argvHas(n.Command, "--master_addr=10.9.9.9") || !argvHas(n.Command, "--master_port=1234") {
					t.Errorf("%s command = %q", n.Host, n.Command)
				}
				if strings.Count(strings.Join(n.Command, " "), "--master_addr") != 1 {
					t.Errorf("%s: --master-addr twice: %q", n.Host, n.Command)
				}
				if n.Env["MASTER_ADDR"] != (Var{Value: "10.9.9.9", Reason: "--master-addr", Source: SourceUser}) {
					t.Errorf("MASTER_ADDR = %+v", n.Env["MASTER_ADDR"])
				}
			}
			if !strings.Contains(p.Nodes[1].Env["NCCL_SOCKET_IFNAME"].Reason, "10.9.9.9") {
				t.Errorf("interface reason = %q", p.Nodes[1].Env["NCCL_SOCKET_IFNAME"].Reason)
			}
		}},
		{"user output choice keeps tee off", func() Spec {
			s := newSpec([]string{"--redirects=3"}, "train.py")
			s.Hosts = testHosts("a,b")
			return s
		}, twoNodes, func(t *testing.T, p Plan) {
			if argvHasPrefix(p.Nodes[0].Command, "--tee") || !argvHas(p.Nodes[0].Command, "--redirects=3") {
				t.Errorf("command = %q", p.Nodes[0].Command)
			}
		}},
		{"c10d rendezvous decides ranks", func() Spec {
			s := newSpec([]string{"--rdzv_backend=c10d", "--rdzv_endpoint=a:29400", "--nproc_per_node=2"}, "train.py")
			s.Hosts = testHosts("a,b")
			return s
		}, twoNodes, func(t *testing.T, p Plan) {
			for _, n := range p.Nodes {
				for _, bad := range []string{"--node_rank", "--master_addr", "--master_port"} {
					if argvHasPrefix(n.Command, bad) {
						t.Errorf("%s command has %s: %q", n.Host, bad, n.Command)
					}
				}
				if !argvHas(n.Command, "--rdzv_endpoint=a:29400") || !argvHas(n.Command, "--nnodes=2") {
					t.Errorf("%s command = %q", n.Host, n.Command)
				}
				if got := ranksOf(n); !slices.Equal(got, []int{-1, -1}) {
					t.Errorf("%s ranks = %v, want -1", n.Host, got)
				}
				if _, set := n.Env["MASTER_ADDR"]; set {
					t.Errorf("%s: MASTER_ADDR planned under c10d", n.Host)
				}
			}
			if !hasNote(p, NoteInfo, "rendezvous c10d") {
				t.Errorf("notes = %+v", p.Notes)
			}
		}},
		{"static with endpoint keeps node rank", func() Spec {
			s := newSpec([]string{"--rdzv_endpoint=a:29600", "--nproc_per_node=1"}, "train.py")
			s.Hosts = testHosts("a,b")
			return s
		}, twoNodes, func(t *testing.T, p Plan) {
			n := p.Nodes[1]
			if !argvHas(n.Command, "--node_rank=1") || argvHasPrefix(n.Command, "--master_addr") {
				t.Errorf("command = %q", n.Command)
			}
			if n.Env["MASTER_ADDR"].Value != "a" || n.Env["MASTER_PORT"].Value != "29600" {
				t.Errorf("master = %+v %+v", n.Env["MASTER_ADDR"], n.Env["MASTER_PORT"])
			}
			if got := ranksOf(n); !slices.Equal(got, []int{1}) {
				t.Errorf("ranks = %v", got)
			}
		}},
		{"standalone on one host", func() Spec {
			s := newSpec([]string{"--standalone", "--nproc_per_node=2"}, "train.py")
			s.Hosts = testHosts("a")
			return s
		}, twoNodes, func(t *testing.T, p Plan) {
			if !argvHas(p.Nodes[0].Command, "--standalone") || argvHasPrefix(p.Nodes[0].Command, "--node_rank") {
				t.Errorf("command = %q", p.Nodes[0].Command)
			}
			if got := ranksOf(p.Nodes[0]); !slices.Equal(got, []int{0, 1}) {
				t.Errorf("ranks = %v, want 0 1 on a single node", got)
			}
			if _, set := p.Nodes[0].Env["NCCL_SOCKET_IFNAME"]; set {
				t.Error("interface pinned on a single node")
			}
		}},
		{"unequal slots give prefix ranks", func() Spec {
			s := newSpec(nil, "train.py")
			s.Hosts = testHosts("a:3,b:1,c:2")
			return s
		}, nil, func(t *testing.T, p Plan) {
			var got [][]int
			for _, n := range p.Nodes {
				got = append(got, ranksOf(n))
			}
			if !reflect.DeepEqual(got, [][]int{{0, 1, 2}, {3}, {4, 5}}) {
				t.Errorf("ranks = %v", got)
			}
			if !hasNote(p, NotePending, "address of a, b, c") || !hasNote(p, NotePending, "interface selection") {
				t.Errorf("notes = %+v", p.Notes)
			}
			if p.Nodes[0].Address != "a" || p.Nodes[1].Env["MASTER_ADDR"].Value != "a" {
				t.Errorf("address = %q, MASTER_ADDR = %+v", p.Nodes[0].Address, p.Nodes[1].Env["MASTER_ADDR"])
			}
		}},
		{"unknown nproc leaves later ranks unknown", func() Spec {
			s := newSpec([]string{"--nproc_per_node=gpu"}, "train.py")
			s.Hosts = testHosts("a,b,c:2")
			return s
		}, Facts{"a": smallFacts(2, "eth0", "10.0.0.1")}, func(t *testing.T, p Plan) {
			if got := ranksOf(p.Nodes[0]); !slices.Equal(got, []int{0, 1}) {
				t.Errorf("a ranks = %v", got)
			}
			if len(p.Nodes[1].Ranks) != 0 {
				t.Errorf("b ranks = %v, want none", p.Nodes[1].Ranks)
			}
			if got := ranksOf(p.Nodes[2]); !slices.Equal(got, []int{-1, -1}) {
				t.Errorf("c ranks = %v, want unknown", got)
			}
		}},
		{"slots replace the user's nproc", func() Spec {
			s := newSpec([]string{"--nproc_per_node=4"}, "train.py")
			s.Hosts = testHosts("a:2,b")
			return s
		}, nil, func(t *testing.T, p Plan) {
			if !argvHas(p.Nodes[0].Command, "--nproc_per_node=2") || argvHas(p.Nodes[0].Command, "--nproc_per_node=4") {
				t.Errorf("a command = %q", p.Nodes[0].Command)
			}
			if !argvHas(p.Nodes[1].Command, "--nproc_per_node=4") {
				t.Errorf("b command = %q", p.Nodes[1].Command)
			}
			if !hasNote(p, NoteWarn, "--nproc-per-node=4", "a") {
				t.Errorf("notes = %+v", p.Notes)
			}
		}},
		{"user environment wins and is warned about", func() Spec {
			s := newSpec(nil, "train.py")
			s.Hosts = []hosts.Host{{Name: "a", Slots: 2, GPUs: []int{2, 3}}, {Name: "b", Slots: 2}}
			s.Environ = map[string]string{
				"NCCL_SOCKET_IFNAME": "eth9",
				"NCCL_NVLS_ENABLE":   "0",
				"NCCL_ALGO":          "Ring",
				"PATH":               "/head/bin",
				"LD_LIBRARY_PATH":    "/head/lib",
				"HOME":               "/root",
				"OMP_NUM_THREADS":    "6",
			}
			s.Gorun.Env = []string{"CUDA_VISIBLE_DEVICES=1,0", "NCCL_DEBUG=INFO", "NCCL_DEBUG=WARN"}
			return s
		}, Facts{"a": smallFacts(4, "eth0", "10.0.0.1"), "b": smallFacts(4, "eth1", "10.0.0.2")}, func(t *testing.T, p Plan) {
			for _, n := range p.Nodes {
				e := n.Env
				if e["NCCL_SOCKET_IFNAME"] != (Var{Value: "eth9", Reason: "exported on the head node", Source: SourceUser}) {
					t.Errorf("%s NCCL_SOCKET_IFNAME = %+v", n.Host, e["NCCL_SOCKET_IFNAME"])
				}
				if e["NCCL_NVLS_ENABLE"].Value != "0" || e["NCCL_NVLS_ENABLE"].Source != SourceUser {
					t.Errorf("%s NCCL_NVLS_ENABLE = %+v", n.Host, e["NCCL_NVLS_ENABLE"])
				}
				if e["NCCL_DEBUG"].Value != "WARN" {
					t.Errorf("%s NCCL_DEBUG = %+v, want the later --env", n.Host, e["NCCL_DEBUG"])
				}
				for _, name := range []string{"PATH", "LD_LIBRARY_PATH", "HOME"} {
					if _, set := e[name]; set {
						t.Errorf("%s: %s carried from the head", n.Host, name)
					}
				}
				if e["OMP_NUM_THREADS"].Value != "6" || e["CUDA_VISIBLE_DEVICES"].Value != "1,0" {
					t.Errorf("%s: user values lost: %+v %+v", n.Host, e["OMP_NUM_THREADS"], e["CUDA_VISIBLE_DEVICES"])
				}
				if got := *n.Ranks[0].GPU; got != 1 {
					t.Errorf("%s rank 0 GPU = %d, want 1 from the user's CUDA_VISIBLE_DEVICES", n.Host, got)
				}
			}
			if !hasNote(p, NoteWarn, "NCCL_SOCKET_IFNAME=eth9", "a, b") || !hasNote(p, NoteWarn, "CUDA_VISIBLE_DEVICES=1,0", "on a") {
				t.Errorf("override notes missing: %+v", p.Notes)
			}
			if !hasNote(p, NoteWarn, "NCCL_ALGO=Ring", "debugging") {
				t.Errorf("debugging knob not warned: %+v", p.Notes)
			}
			if hasNote(p, NoteInfo, "left to NCCL", "NCCL_NVLS_ENABLE") || !hasNote(p, NoteInfo, "left to NCCL", "NCCL_PROTO") {
				t.Errorf("left-to-NCCL note wrong: %+v", p.Notes)
			}
			if !hasNote(p, NoteInfo, "carried", "NCCL_ALGO, NCCL_NVLS_ENABLE, NCCL_SOCKET_IFNAME, OMP_NUM_THREADS") {
				t.Errorf("carried note wrong: %+v", p.Notes)
			}
		}},
		{"include restricts GPUs", func() Spec {
			s := newSpec(nil, "train.py")
			s.Hosts = []hosts.Host{{Name: "a", Slots: 2, GPUs: []int{1, 3}}}
			return s
		}, nil, func(t *testing.T, p Plan) {
			n := p.Nodes[0]
			if n.Env["CUDA_VISIBLE_DEVICES"].Value != "1,3" || n.Env["CUDA_DEVICE_ORDER"].Value != "PCI_BUS_ID" {
				t.Errorf("env = %+v", n.Env)
			}
			if *n.Ranks[0].GPU != 1 || *n.Ranks[1].GPU != 3 {
				t.Errorf("GPUs = %d %d", *n.Ranks[0].GPU, *n.Ranks[1].GPU)
			}
		}},
		{"numa binding leaves CPUs to torchrun", func() Spec {
			s := newSpec([]string{"--numa-binding=node", "--nproc_per_node=2"}, "train.py")
			return s
		}, Facts{"localhost": smallFacts(2, "", "")}, func(t *testing.T, p Plan) {
			for _, r := range p.Nodes[0].Ranks {
				if r.CPUs != "" {
					t.Errorf("rank %d CPUs = %q", r.LocalRank, r.CPUs)
				}
			}
			if p.Nodes[0].Env["OMP_NUM_THREADS"].Source != SourceTorchrun || !hasNote(p, NoteInfo, "--numa-binding=node") {
				t.Errorf("env %+v notes %+v", p.Nodes[0].Env, p.Notes)
			}
		}},
		{"run-path cannot bind", func() Spec {
			return newSpec([]string{"--run-path", "--nproc_per_node=2"}, "train.py")
		}, Facts{"localhost": smallFacts(2, "", "")}, func(t *testing.T, p Plan) {
			if p.Nodes[0].Ranks[0].CPUs != "" || !hasNote(p, NoteWarn, "--run-path") {
				t.Errorf("ranks %+v notes %+v", p.Nodes[0].Ranks, p.Notes)
			}
		}},
		{"CPU-only node split evenly", func() Spec {
			return newSpec([]string{"--nproc_per_node=3", "--nnodes=1"}, "train.py")
		}, Facts{"localhost": {CPUs: "0-9", Gorun: testGorun, Python: testPython}}, func(t *testing.T, p Plan) {
			var got []string
			for _, r := range p.Nodes[0].Ranks {
				got = append(got, r.CPUs)
				if r.GPU != nil {
					t.Errorf("rank %d has GPU %d on a node without GPUs", r.LocalRank, *r.GPU)
				}
			}
			if !slices.Equal(got, []string{"0-3", "4-6", "7-9"}) {
				t.Errorf("CPUs = %q", got)
			}
			if _, set := p.Nodes[0].Env["CUDA_DEVICE_ORDER"]; set {
				t.Error("CUDA_DEVICE_ORDER set on a node without GPUs")
			}
			if p.Nodes[0].Env["OMP_NUM_THREADS"].Value != "3" {
				t.Errorf("OMP_NUM_THREADS = %+v", p.Nodes[0].Env["OMP_NUM_THREADS"])
			}
		}},
		{"GPU locality respects the allowed CPUs", func() Spec {
			return newSpec([]string{"--nproc_per_node=8"}, "train.py")
		}, Facts{"localhost": func() NodeFacts {
			f := dgxFacts("", "")
			f.CPUs = "0-23,48-71" // a cgroup gives half of each NUMA node
			return f
		}()}, func(t *testing.T, p Plan) {
			var got []string
			for _, r := range p.Nodes[0].Ranks {
				got = append(got, r.CPUs)
			}
			want := []string{"0-5", "6-11", "12-17", "18-23", "48-53", "54-59", "60-65", "66-71"}
			if !slices.Equal(got, want) {
				t.Errorf("CPUs = %q, want %q", got, want)
			}
		}},
		{"too few CPUs leaves ranks unbound", func() Spec {
			return newSpec([]string{"--nproc_per_node=4"}, "train.py")
		}, Facts{"localhost": {CPUs: "0-1", Gorun: testGorun, Python: testPython, GPUs: []GPU{{Index: 0, NUMANode: 0, CPUs: "0-1"}, {Index: 1, NUMANode: 0, CPUs: "0-1"}, {Index: 2, NUMANode: 0, CPUs: "0-1"}, {Index: 3, NUMANode: 0, CPUs: "0-1"}}}}, func(t *testing.T, p Plan) {
			if p.Nodes[0].Ranks[0].CPUs != "" || !hasNote(p, NoteWarn, "cannot be split") {
				t.Errorf("ranks %+v notes %+v", p.Nodes[0].Ranks, p.Notes)
			}
		}},
		{"static range: torchrun gets the attempt's hosts, the range is gorun's", func() Spec {
			s := newSpec([]string{"--nnodes=1:3"}, "train.py")
			s.Hosts = testHosts("a:1,b:1")
			return s
		}, nil, func(t *testing.T, p Plan) {
			if c := p.Nodes[1].Command; !slices.Contains(c, "--nnodes=2") {
				t.Errorf("command = %q, want --nnodes=2", c)
			}
			if p.Config.NNodesMin != 1 || p.Config.NNodesMax != 3 || !hasNote(p, NoteInfo, "drops a node") {
				t.Errorf("config %d:%d, notes %+v", p.Config.NNodesMin, p.Config.NNodesMax, p.Notes)
			}
		}},
		{"torchrun command with words", func() Spec {
			s := newSpec(nil, "train.py")
			s.Gorun.Torchrun = "python3  -m torch.distributed.run"
			return s
		}, nil, func(t *testing.T, p Plan) {
			want := []string{"python3", "-m", "torch.distributed.run", "--max_restarts=0", "--monitor_interval=0.1", "--no_python", wire.SelfArg, "_rank", "--", "train.py"}
			if !slices.Equal(p.Nodes[0].Command, want) {
				t.Errorf("command = %q", p.Nodes[0].Command)
			}
		}},
		{"short options keep their value apart", func() Spec {
			s := newSpec(nil, "train.py")
			s.Given = []cmdline.Arg{{Name: "-r", Dest: "redirects", Value: "3"}}
			return s
		}, nil, func(t *testing.T, p Plan) {
			want := []string{"torchrun", "-r", "3", "--max_restarts=0", "--monitor_interval=0.1", "--no_python", wire.SelfArg, "_rank", "--", "train.py"}
			if !slices.Equal(p.Nodes[0].Command, want) {
				t.Errorf("command = %q", p.Nodes[0].Command)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Build(tt.spec(), tt.facts)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, p)
		})
	}
}

// TestBuildDeterministic builds the same spec repeatedly: map order must
// not leak into the plan.
func TestBuildDeterministic(t *testing.T) {
	for _, c := range goldenCases() {
		t.Run(c.name, func(t *testing.T) {
			c.spec.Environ = map[string]string{}
			for _, n := range []string{"NCCL_A", "NCCL_B", "TORCH_C", "GLOO_D", "PYTORCH_E", "NCCL_ALGO", "NCCL_SOCKET_IFNAME"} {
				c.spec.Environ[n] = "v"
			}
			first, err := Build(c.spec, c.facts)
			if err != nil {
				t.Fatal(err)
			}
			for range 20 {
				again, err := Build(c.spec, c.facts)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(first, again) {
					t.Fatalf("plans differ:\n%+v\n%+v", first.Notes, again.Notes)
				}
			}
		})
	}
}

// TestBuildSharesNothing checks that the plan does not alias the spec.
func TestBuildSharesNothing(t *testing.T) {
	s := newSpec(nil, "train.py", "--x")
	s.Hosts = []hosts.Host{{Name: "a", Slots: 2, GPUs: []int{0, 1}}}
	p, err := Build(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Hosts[0].GPUs[0] = 7
	s.Torchrun.TrainingScriptArgs[0] = "--changed"
	if *p.Nodes[0].Ranks[0].GPU != 0 || p.Config.TrainingScriptArgs[0] != "--x" {
		t.Errorf("plan changed with the spec: GPU %d, args %q", *p.Nodes[0].Ranks[0].GPU, p.Config.TrainingScriptArgs)
	}
}

// TestFlightRecorder: --flight-recorder turns PyTorch's NCCL flight
// recorder on in every worker, writing to a node-side folder of this run;
// a value the user set wins.
func TestFlightRecorder(t *testing.T) {
	s := newSpec([]string{"--nproc_per_node=2"}, "train.py")
	s.Gorun.FlightRecorder = "/shared/fr"
	s.RunID = "abc"
	s.Environ = map[string]string{"TORCH_NCCL_TRACE_BUFFER_SIZE": "500"}
	p, err := Build(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	env := p.Nodes[0].Env
	if v := env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"]; v.Value != "/tmp/gorun-flight-recorder-abc/localhost/nccl_trace_rank_" || v.Source != SourceGorun {
		t.Errorf("TORCH_NCCL_DEBUG_INFO_TEMP_FILE = %+v", v)
	}
	if v := env["TORCH_NCCL_DUMP_ON_TIMEOUT"]; v.Value != "1" {
		t.Errorf("TORCH_NCCL_DUMP_ON_TIMEOUT = %+v", v)
	}
	if v := env["TORCH_NCCL_TRACE_BUFFER_SIZE"]; v.Value != "500" || v.Source != SourceUser {
		t.Errorf("the user's TORCH_NCCL_TRACE_BUFFER_SIZE lost: %+v", v)
	}
	if v := env[wire.FlightRecorderDirVar]; v.Value != "/tmp/gorun-flight-recorder-abc/localhost" {
		t.Errorf("%s = %+v", wire.FlightRecorderDirVar, v)
	}
}

// Settings that are wrong in local mode only, or in head-node mode only.
func TestBuildChecksByMode(t *testing.T) {
	tests := []struct {
		name    string
		options []string
		hosts   string // "" for local mode
		ok      bool
	}{
		{"node rank below --nnodes", []string{"--node-rank=1", "--nnodes=2"}, "", true},
		{"node rank below a range's maximum", []string{"--node-rank=3", "--nnodes=1:4"}, "", true},
		{"node rank beyond --nnodes", []string{"--node-rank=2", "--nnodes=2"}, "", false},
		{"node rank is gorun's in head-node mode", []string{"--node-rank=5"}, "a,b", true},
		{"node rank ignored by c10d", []string{"--rdzv-backend=c10d", "--node-rank=5"}, "", true},
		{"c10d port 0 on one host", []string{"--rdzv-backend=c10d", "--rdzv-endpoint=a:0"}, "a", true},
		{"c10d port 0 in local mode", []string{"--rdzv-backend=c10d", "--rdzv-endpoint=localhost:0"}, "", true},
		{"c10d port 0 on two hosts", []string{"--rdzv-backend=c10d", "--rdzv-endpoint=a:0"}, "a,b", false},
		{"c10d port on two hosts", []string{"--rdzv-backend=c10d", "--rdzv-endpoint=a:29400"}, "a,b", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSpec(tt.options, "train.py")
			if tt.hosts != "" {
				s.Hosts = testHosts(tt.hosts)
			}
			_, err := Build(s, nil)
			var ie *userr.InputError
			if tt.ok && err != nil || !tt.ok && !errors.As(err, &ie) {
				t.Errorf("Build: %v, want ok %v", err, tt.ok)
			}
		})
	}
}

// An explicit --nproc-per-node wins over every count the allocation
// implies: SLURM_TASKS_PER_NODE=1(x3) under a plain `sbatch -N 3`, tasks
// or GPUs asked of Slurm. The plan says so in a note, with the counts it
// did not take.
func TestExplicitNProcWinsOverAllocation(t *testing.T) {
	for _, tc := range []struct {
		name, note string
	}{
		{"default task count", "(node0:1, node1:1, node2:1)"},
		{"asked tasks per node", "(node0:4, node1:4, node2:4)"},
		{"GPUs on the node", "(node0:8, node1:8, node2:8)"},
		{"the same count", ""},
	} {
		env := map[string]map[string]string{
			"default task count":   {"SLURM_TASKS_PER_NODE": "1(x3)"},
			"asked tasks per node": {"SLURM_TASKS_PER_NODE": "4(x3)", "SLURM_NTASKS_PER_NODE": "4"},
			"GPUs on the node":     {"SLURM_TASKS_PER_NODE": "1(x3)", "SLURM_GPUS_ON_NODE": "8"},
			"the same count":       {"SLURM_TASKS_PER_NODE": "2(x3)", "SLURM_NTASKS_PER_NODE": "2"},
		}[tc.name]
		t.Run(tc.name, func(t *testing.T) {
			env["SLURM_JOB_NODELIST"] = "node[0-2]"
			hosts, err := hosts.FromSlurm(func(k string) string { return env[k] })
			if err != nil {
				t.Fatal(err)
			}
			spec := newSpec([]string{"--nproc_per_node=2"}, "train.py")
			spec.Hosts = hosts
			p, err := Build(spec, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range p.Nodes {
				if got := len(ranksOf(n)); got != 2 {
					t.Errorf("%s: %d ranks, want --nproc_per_node's 2", n.Host, got)
				}
			}
			var notes []string
			for _, n := range p.Notes {
				if strings.Contains(n.Message, "given on the command line, wins over") {
					notes = append(notes, n.Message)
				}
			}
			switch {
			case tc.note == "" && len(notes) > 0:
				t.Errorf("a note with nothing replaced: %q", notes)
			case tc.note != "" && (len(notes) != 1 || !strings.Contains(notes[0], tc.note) || !strings.Contains(notes[0], "Slurm allocation")):
				t.Errorf("notes %q, want one naming %s and the Slurm allocation", notes, tc.note)
			}
		})
	}
}

// TestEnvNameTakesTheHeadsValue: --env NAME carries the head's value of
// NAME to the workers, marked as the user's, and the plan's renderers
// show it as they show any user value (a secret's hidden).
func TestEnvNameTakesTheHeadsValue(t *testing.T) {
	s := newSpec(nil, "train.py")
	s.Environ = map[string]string{"HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz0123456789", "MY_SETTING": "7"}
	s.Gorun.Env = []string{"HF_TOKEN", "MY_SETTING"}
	p, err := Build(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"HF_TOKEN": s.Environ["HF_TOKEN"], "MY_SETTING": "7"} {
		v := p.Nodes[0].Env[name]
		if v.Value != want || v.Source != SourceUser || v.Reason != reasonEnvHead {
			t.Errorf("%s = %+v, want the head's value from --env NAME", name, v)
		}
	}
}

// TestMixedSlotsWithNProc: hosts with and without a slot count are fine
// where --nproc-per-node says what those without one get.
func TestMixedSlotsWithNProc(t *testing.T) {
	s := newSpec([]string{"--nproc-per-node=4"}, "train.py")
	s.Hosts = testHosts("a:8,b")
	p, err := Build(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Nodes) != 2 || len(p.Nodes[0].Ranks) != 8 || len(p.Nodes[1].Ranks) != 4 {
		t.Errorf("ranks per node: %d and %d, want 8 and 4", len(p.Nodes[0].Ranks), len(p.Nodes[1].Ranks))
	}
}

// TestMonitorInterval: where the user set no --monitor-interval, torchrun
// gets 0.1 s (an older torchrun's 5 s would hold a finished run); one the
// user gave on the command line is passed as given, and no other is added.
func TestMonitorInterval(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		want  []string // in the command
		never string   // not in the command
	}{
		{"unset", []string{"--nproc_per_node=2"}, []string{"--monitor_interval=0.1"}, ""},
		{"given", []string{"--nproc_per_node=2", "--monitor-interval=2"}, []string{"--monitor_interval=2"}, "--monitor_interval=0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Build(newSpec(tc.args, "train.py"), nil)
			if err != nil {
				t.Fatal(err)
			}
			cmd := p.Nodes[0].Command
			for _, w := range tc.want {
				if !slices.Contains(cmd, w) {
					t.Errorf("command %q has no %s", cmd, w)
				}
			}
			if tc.never != "" && slices.Contains(cmd, tc.never) {
				t.Errorf("command %q has %s beside the user's own", cmd, tc.never)
			}
		})
	}
}
