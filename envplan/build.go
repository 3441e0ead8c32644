package envplan

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/hosts"
	"github.com/gorun/gorun/internal/cpuset"
	"github.com/gorun/gorun/internal/userr"
)

// localHost names the single node of local mode (no hosts given). Facts for
// it are looked up under this name too.
const localHost = "localhost"

// defaultMasterPort is torchrun's --master-port default.
const defaultMasterPort = 29500

// Build turns the user's spec and what preflight learned into a Plan. It is
// pure and deterministic: maps are walked in sorted order and notes come out
// in the order the decisions are made. Facts may be nil or partial; the plan
// then says which decisions wait for preflight.
//
// With no hosts, Build plans plain torchrun on this machine ("local mode"):
// the command is torchrun with the user's options as given. With hosts
// ("head-node mode") it decides per node what torchrun cannot know on its
// own: --nnodes, --node-rank, --master-addr and --master-port (static
// rendezvous), --nproc-per-node from the host's slots, and --max-restarts=0,
// since gorun restarts the whole group itself.
//
// Errors caused by the spec are *userr.InputError.
func Build(spec Spec, facts Facts) (Plan, error) {
	b, err := newBuilder(spec, facts)
	if err != nil {
		return Plan{}, err
	}
	return b.build()
}

// builder carries the job-wide decisions while the nodes are planned.
type builder struct {
	spec  Spec
	cfg   cmdline.Config
	facts Facts
	head  bool         // head-node mode: gorun starts torchrun on every host
	hosts []hosts.Host // the nodes, in node-rank order

	static     bool // torchrun's static rendezvous: ranks follow --node-rank
	endpoint   bool // the user gave --rdzv-endpoint
	nnodesMin  int
	nnodesMax  int
	masterAddr Var // MASTER_ADDR as torchrun will set it; Value "" when the rendezvous decides
	masterPort Var

	userEnv map[string]Var // --env and the carried exported variables
	carried []string       // exported names carried to the nodes (head-node mode)
	notes   []Note
	// Hosts whose decisions wait for preflight or contradict the user,
	// gathered so that each becomes one note rather than one per node.
	pendingIface []string
	slotsOver    []string
	override     map[string]*overridden // variable → where a user value replaced gorun's
	p2pOff       map[string]bool        // NCCL knobs p2pFaultRule set on some node
	// cpulists parsed so far: a big job repeats the same few strings on
	// every node. The slices are shared and never written.
	cpulists map[string]parsedCPUs
	// CPU splits computed so far, by node shape (see bindKey): the nodes of
	// a cluster are mostly alike, so each shape is split once.
	splits map[string]cpuSplit
}

// cpuSplit is one node shape's per-rank cpulists, or why it cannot be split.
type cpuSplit struct {
	lists  []string
	fewest int
	why    string
}

type parsedCPUs struct {
	cpus []int
	err  error
}

// cpus parses a cpulist from the facts, once per distinct string.
func (b *builder) cpus(list string) ([]int, error) {
	if p, ok := b.cpulists[list]; ok {
		return p.cpus, p.err
	}
	cpus, err := cpuset.Parse(list)
	b.cpulists[list] = parsedCPUs{cpus, err}
	return cpus, err
}

func newBuilder(spec Spec, facts Facts) (*builder, error) {
	b := &builder{
		spec:     spec,
		cfg:      copyConfig(spec.Torchrun),
		facts:    facts,
		head:     len(spec.Hosts) > 0,
		override: map[string]*overridden{},
		cpulists: map[string]parsedCPUs{},
	}
	var replaced []string
	b.hosts, replaced = slotsGiven(spec)
	if len(replaced) > 0 {
		b.note(NoteWarn, "--nproc-per-node=%s, given on the command line, wins over the slot counts the %s gives (%s); drop it to take theirs",
			spec.Torchrun.NProcPerNode, slotSource(spec), strings.Join(replaced, ", "))
	}
	if !b.head {
		b.hosts = []hosts.Host{{Name: localHost}}
	}
	if spec.Torchrun.TrainingScript == "" {
		return nil, &userr.InputError{
			Where:   "training_script",
			Problem: "no training script given",
			Fix:     "name the script (or module, with -m) after the options: gorun [options] train.py [args]",
		}
	}
	if err := mixedSlots(b.hosts, spec); err != nil {
		return nil, err
	}
	if err := b.decideRendezvous(); err != nil {
		return nil, err
	}
	b.headNotes()
	b.perNodeNotes()
	if err := b.collectUserEnv(); err != nil {
		return nil, err
	}
	return b, nil
}

// copyConfig returns c with its slice and map copied and never nil, so the
// plan shares nothing with the caller and renders [] and {} rather than null.
func copyConfig(c cmdline.Config) cmdline.Config {
	c.TrainingScriptArgs = append([]string{}, c.TrainingScriptArgs...)
	rc := make(map[string]string, len(c.RdzvConfigs))
	maps.Copy(rc, c.RdzvConfigs)
	c.RdzvConfigs = rc
	return c
}

func (b *builder) note(level, format string, args ...any) {
	b.notes = append(b.notes, Note{Level: level, Message: fmt.Sprintf(format, args...)})
}

// decideRendezvous settles the job-wide torchrun settings: how many nodes,
// whether ranks are static, and where the master is.
func (b *builder) decideRendezvous() error {
	c := &b.cfg
	b.static = c.RdzvBackend == "static" && !c.Standalone
	// torchrun's config fills a static rendezvous's endpoint in from
	// --master-addr/--master-port, so only an endpoint the user gave counts.
	b.endpoint = c.RdzvEndpoint != "" && b.spec.Set("rdzv_endpoint")
	b.nnodesMin, b.nnodesMax = c.NNodesMin, c.NNodesMax
	n := len(b.hosts)

	if b.head {
		if c.Standalone && n > 1 {
			return &userr.InputError{
				Where:   "--standalone",
				Problem: fmt.Sprintf("--standalone runs a single-node job, but %d hosts were given", n),
				Fix:     "drop --standalone, or give one host",
			}
		}
		if b.spec.Set("nnodes") {
			if err := b.checkNNodes(n); err != nil {
				return err
			}
		} else {
			b.nnodesMin, b.nnodesMax = n, n
		}
		c.NNodesMin, c.NNodesMax = b.nnodesMin, b.nnodesMax
		if _, p := splitEndpoint(c.RdzvEndpoint); b.endpoint && p == "0" && n > 1 {
			return &userr.InputError{
				Where:   b.givenAs("rdzv_endpoint"),
				Problem: fmt.Sprintf("port 0 in %s lets the store listen on a port that the other %d nodes never learn", userr.Quote(c.RdzvEndpoint), n-1),
				Fix:     "give a port number; port 0 suits only a single-node c10d rendezvous",
			}
		}
	} else if b.static && c.NodeRank >= c.NNodesMax {
		// torchrun's static rendezvous would wait for a rank that
		// cannot exist; in head-node mode gorun numbers the nodes itself.
		return &userr.InputError{
			Where:   b.givenAs("node_rank"),
			Problem: fmt.Sprintf("node rank %d is not below the node count %d", c.NodeRank, c.NNodesMax),
			Fix:     fmt.Sprintf("give --node-rank from 0 to %d, or raise --nnodes", c.NNodesMax-1),
		}
	}

	// The parser refuses --master-port 0; a Config built by hand may leave
	// the port unset.
	port := c.MasterPort
	if port == 0 {
		port = defaultMasterPort
	}
	// A master address or port the user gave wins and is marked as theirs;
	// otherwise it is what torchrun will export from gorun's flags.
	portReason, portSource := "torchrun's default --master-port", SourceTorchrun
	if b.spec.Set("master_port") {
		portReason, portSource = b.givenAs("master_port"), SourceUser
	}
	switch {
	case c.Standalone:
		b.note(NoteInfo, "--standalone: torchrun runs its own c10d rendezvous on localhost with a free port; MASTER_ADDR and MASTER_PORT come from it")
	case !b.static:
		b.note(NoteInfo, "rendezvous %s at %s decides MASTER_ADDR (the first agent's host name unless --local-addr is set) and the group ranks", c.RdzvBackend, orNone(c.RdzvEndpoint))
	case b.endpoint:
		// torchrun's static rendezvous takes its store address from
		// --rdzv-endpoint when given and ignores --master-addr/--master-port.
		host, p := splitEndpoint(c.RdzvEndpoint)
		b.masterAddr = Var{Value: host, Reason: "host of --rdzv-endpoint (static rendezvous store)", Source: SourceTorchrun}
		b.masterPort = Var{Value: p, Reason: "port of --rdzv-endpoint (static rendezvous store)", Source: SourceTorchrun}
	case b.spec.Set("master_addr") || !b.head:
		addr := Var{Value: c.MasterAddr, Reason: b.givenAs("master_addr"), Source: SourceUser}
		if !b.spec.Set("master_addr") {
			if c.MasterAddr == "" {
				c.MasterAddr = "127.0.0.1"
			}
			addr = Var{Value: c.MasterAddr, Reason: "torchrun's default --master-addr", Source: SourceTorchrun}
		}
		b.masterAddr = addr
		b.masterPort = Var{Value: strconv.Itoa(port), Reason: portReason, Source: portSource}
	default:
		addr, known := b.address(b.hosts[0].Name)
		reason := fmt.Sprintf("address of node 0 (%s)", b.hosts[0].Name)
		if iface := b.facts[b.hosts[0].Name].Interface; known && iface != "" {
			reason = fmt.Sprintf("address of node 0 (%s) on %s", b.hosts[0].Name, iface)
		}
		if !known {
			reason = "host name of node 0 until preflight finds its address"
		}
		c.MasterAddr = addr
		b.masterAddr = Var{Value: addr, Reason: reason, Source: SourceTorchrun}
		b.masterPort = Var{Value: strconv.Itoa(port), Reason: portReason, Source: portSource}
	}
	if b.static && !b.endpoint {
		c.MasterPort = port
		if b.head {
			c.RdzvEndpoint = c.MasterAddr + ":" + strconv.Itoa(port)
		}
	}
	if b.head && b.static {
		delete(c.RdzvConfigs, "rank") // per node: see each node's --node-rank
	}
	return nil
}

// givenAs names how the user set the torchrun option with this dest, for an
// error's Where: "--node-rank", or "PET_NODE_RANK" when the environment set it.
func (b *builder) givenAs(dest string) string {
	where := "--" + strings.ReplaceAll(dest, "_", "-")
	for _, a := range b.spec.Given {
		if a.Dest == dest && a.FromEnv {
			where = "PET_" + strings.ToUpper(dest)
		} else if a.Dest == dest {
			where = a.Name
		}
	}
	return where
}

// checkNNodes verifies a user --nnodes against the host count in head-node
// mode, where a mismatch would leave torchrun waiting for nodes that never
// come.
func (b *builder) checkNNodes(n int) error {
	lo, hi := b.nnodesMin, b.nnodesMax
	given := strconv.Itoa(hi)
	if lo != hi {
		given = fmt.Sprintf("%d:%d", lo, hi)
	}
	switch {
	case lo == hi && hi != n:
		return &userr.InputError{
			Where:   "--nnodes",
			Problem: fmt.Sprintf("--nnodes=%s but %d hosts were given", given, n),
			Fix:     "drop --nnodes (gorun sets it from the hosts) or give that many hosts",
		}
	case b.static && n > hi:
		return &userr.InputError{
			Where:   "--nnodes",
			Problem: fmt.Sprintf("static rendezvous waits for --nnodes maximum %d, but %d hosts were given", hi, n),
			Fix:     "give at most that many hosts, or use --rdzv-backend=c10d, where extra nodes wait as spares",
		}
	case b.static && lo != hi:
		// gorun decides which nodes run each attempt, so torchrun gets
		// the exact count; the range is gorun's, for dropping a node
		// that fails its checks before a restart.
		b.note(NoteInfo, "--nnodes=%s with a static rendezvous: torchrun gets --nnodes=%d, the hosts of this attempt; on a restart gorun drops a node that fails its checks while at least %d remain", given, n, lo)
	case n < lo:
		return &userr.InputError{
			Where:   "--nnodes",
			Problem: fmt.Sprintf("--nnodes=%s needs at least %d nodes, but %d hosts were given", given, lo, n),
			Fix:     "give more hosts or lower the minimum",
		}
	case n > hi:
		b.note(NoteWarn, "--nnodes=%s admits at most %d nodes; the other %d hosts wait as spares", given, hi, n-hi)
	}
	return nil
}

// address returns the address other nodes use to reach host, and whether
// preflight has found it; until then it is the host name itself.
func (b *builder) address(host string) (string, bool) {
	if a := b.facts[host].Address; a != "" {
		return a, true
	}
	return host, false
}

func orNone(s string) string {
	if s == "" {
		return "(no endpoint)"
	}
	return s
}

// splitEndpoint splits "host:port" as torchrun does (the port is optional).
func splitEndpoint(ep string) (host, port string) {
	if strings.HasPrefix(ep, "[") {
		if i := strings.Index(ep, "]"); i > 0 {
			return ep[1:i], strings.TrimPrefix(ep[i+1:], ":")
		}
	}
	if i := strings.LastIndex(ep, ":"); i >= 0 && strings.Count(ep, ":") == 1 {
		return ep[:i], ep[i+1:]
	}
	return ep, ""
}

func (b *builder) build() (Plan, error) {
	p := Plan{Config: b.cfg, Nodes: make([]NodePlan, 0, len(b.hosts))}
	var pendingAddr []string
	single := b.nnodesMin == 1 && b.nnodesMax == 1
	base := 0 // global rank of the next node's local rank 0; -1 once unknown
	for i, h := range b.hosts {
		n := NodePlan{Host: h.Name, NodeRank: i, Env: make(map[string]Var, len(b.userEnv)+8), Ranks: []RankPlan{}}
		addr, known := b.address(h.Name)
		switch {
		case !b.head:
			n.NodeRank = b.cfg.NodeRank
			if !known {
				addr = localHost
			}
		case !known:
			pendingAddr = append(pendingAddr, h.Name)
		}
		n.Address = addr
		nproc, nprocKnown := b.nproc(h)
		fewest := 0 // CPUs of the smallest per-rank set; 0 when not bound
		n.Command = b.command(h, i, nproc, nprocKnown)
		if nprocKnown {
			start := base
			if !b.head {
				// Local mode sees one node of the job; torchrun's static
				// rendezvous gives node k the ranks from k*nproc.
				start = b.cfg.NodeRank * nproc
			}
			if !b.static && !single {
				start = -1
			}
			n.Ranks, fewest = b.ranks(h, nproc, start)
		}
		if base >= 0 && nprocKnown {
			base += nproc
		} else {
			base = -1
		}
		b.env(&n, h, nproc, nprocKnown, fewest)
		b.wrapWorkers(&n, h)
		p.Nodes = append(p.Nodes, n)
	}
	if len(pendingAddr) > 0 {
		b.note(NotePending, "address of %s waits for preflight (route to the master)", listHosts(pendingAddr))
	}
	if len(b.pendingIface) > 0 {
		b.note(NotePending, "interface selection (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME) waits for preflight on %s", listHosts(b.pendingIface))
	}
	if len(b.slotsOver) > 0 {
		b.note(NoteWarn, "--nproc-per-node=%s is replaced by the slots the host list gives %s", b.cfg.NProcPerNode, listHosts(b.slotsOver))
	}
	b.closingNotes()
	p.Notes = b.notes
	if p.Notes == nil {
		p.Notes = []Note{}
	}
	return p, nil
}

// nproc returns how many workers torchrun starts on h, when that can be
// known before the node runs: the host's slots, an integer
// --nproc-per-node, or the node's GPU count for "gpu" and "auto".
func (b *builder) nproc(h hosts.Host) (int, bool) {
	if h.Slots > 0 {
		return h.Slots, true
	}
	word := b.cfg.NProcPerNode
	if word == "" {
		word = "1"
	}
	if n, err := strconv.Atoi(word); err == nil {
		return n, n > 0
	}
	f, known := b.facts[h.Name]
	if !known || (word != "gpu" && word != "auto") {
		return 0, false
	}
	if vis, ok := b.visibleGPUs(h); ok && vis != nil {
		return len(vis), len(vis) > 0
	}
	if word == "auto" && len(f.GPUs) == 0 {
		return 0, false // falls back to os.cpu_count() on the node
	}
	return len(f.GPUs), len(f.GPUs) > 0
}

// visibleGPUs returns the physical GPU indices a node's workers see, in
// CUDA ordinal order: CUDA_VISIBLE_DEVICES as the user set it, else the
// host's --include/--exclude restriction. nil with ok true means no
// restriction; ok false means a restriction gorun cannot read (UUIDs).
func (b *builder) visibleGPUs(h hosts.Host) ([]int, bool) {
	if v, set := b.userEnv["CUDA_VISIBLE_DEVICES"]; set {
		var ids []int
		for f := range strings.SplitSeq(v.Value, ",") {
			id, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || id < 0 {
				return nil, false
			}
			ids = append(ids, id)
		}
		return ids, true
	}
	return h.GPUs, true
}

// ranks plans the workers of one node. base is the global rank of local
// rank 0, or -1 when the rendezvous decides. It also returns the size of
// the smallest CPU set bound to a rank, 0 when ranks are not bound.
func (b *builder) ranks(h hosts.Host, nproc, base int) ([]RankPlan, int) {
	ranks := make([]RankPlan, nproc)
	gpus := b.rankGPUs(h, nproc)
	for l := range ranks {
		r := RankPlan{Rank: -1, LocalRank: l, GPU: gpus[l]}
		if base >= 0 {
			r.Rank = base + l
		}
		ranks[l] = r
	}
	return ranks, b.bindCPUs(h, ranks)
}

// rankGPUs returns each local rank's physical GPU, nil where unknown.
func (b *builder) rankGPUs(h hosts.Host, nproc int) []*int {
	out := make([]*int, nproc)
	if b.cfg.NProcPerNode == "cpu" {
		return out
	}
	vis, ok := b.visibleGPUs(h)
	if !ok {
		return out
	}
	if vis == nil {
		f, known := b.facts[h.Name]
		if !known {
			return out
		}
		for _, g := range f.GPUs {
			vis = append(vis, g.Index)
		}
	}
	// Copied, so the plan shares no memory with the caller's hosts.
	own := slices.Clone(vis[:min(nproc, len(vis))])
	for l := range own {
		out[l] = &own[l]
	}
	return out
}

// bindCPUs gives every rank of a node a disjoint CPU set when the facts
// allow: ranks split the allowed CPUs local to their GPUs, ranks sharing a
// NUMA node splitting that node's share evenly; without GPU locality, and
// with more than one rank, the node's allowed CPUs are split evenly.
func (b *builder) bindCPUs(h hosts.Host, ranks []RankPlan) int {
	if b.cfg.RunPath || b.cfg.NumaBinding != "" || b.spec.Set("numa_binding") {
		return 0 // noted once in closingNotes
	}
	f, known := b.facts[h.Name]
	if !known || f.CPUs == "" {
		return 0
	}
	key := bindKey(f, ranks)
	split, seen := b.splits[key]
	if !seen {
		split = b.split(f, ranks)
		if b.splits == nil {
			b.splits = make(map[string]cpuSplit)
		}
		b.splits[key] = split
	}
	if split.why != "" {
		b.note(NoteWarn, "%s: %s; ranks are not bound", h.Name, split.why)
		return 0
	}
	for i := range split.lists {
		ranks[i].CPUs = split.lists[i]
	}
	return split.fewest
}

// bindKey names what a node's split depends on: its allowed CPUs and, per
// rank, the GPU and that GPU's locality.
func bindKey(f NodeFacts, ranks []RankPlan) string {
	var k strings.Builder
	k.WriteString(f.CPUs)
	for _, r := range ranks {
		k.WriteByte('|')
		if r.GPU == nil {
			continue
		}
		k.WriteString(strconv.Itoa(*r.GPU))
		for _, g := range f.GPUs {
			if g.Index == *r.GPU {
				k.WriteString(":" + strconv.Itoa(g.NUMANode) + ":" + g.CPUs)
				break
			}
		}
	}
	return k.String()
}

// split computes one node shape's per-rank CPU sets.
func (b *builder) split(f NodeFacts, ranks []RankPlan) cpuSplit {
	allowed, err := b.cpus(f.CPUs)
	if err != nil || len(allowed) == 0 {
		return cpuSplit{why: fmt.Sprintf("CPUs %q from preflight are unreadable", f.CPUs)}
	}
	sets, why := b.gpuLocalSplit(f, allowed, ranks)
	if sets == nil && why == "" && len(ranks) > 1 {
		sets = cpuset.Split(allowed, len(ranks))
		if sets == nil {
			why = fmt.Sprintf("%d allowed CPUs cannot be split among %d ranks", len(allowed), len(ranks))
		}
	}
	if why != "" || sets == nil {
		return cpuSplit{why: why}
	}
	lists := make([]string, len(sets))
	for i := range sets {
		lists[i] = cpuset.Format(sets[i])
	}
	return cpuSplit{lists: lists, fewest: fewestCPUs(ranks, sets)}
}

// gpuLocalSplit splits the CPUs local to the ranks' GPUs. It returns nil
// and no reason when the GPUs or their locality are unknown, so the caller
// falls back to splitting the node's CPUs.
func (b *builder) gpuLocalSplit(f NodeFacts, allowed []int, ranks []RankPlan) ([][]int, string) {
	byIndex := make(map[int]GPU, len(f.GPUs))
	for _, g := range f.GPUs {
		byIndex[g.Index] = g
	}
	// Group ranks by their GPU's NUMA node (or, without one, by the
	// GPU's local cpulist), in order of first appearance.
	type group struct {
		pool  []int
		lists []string // the cpulists already in pool
		ranks []int
	}
	var order []string
	groups := map[string]*group{}
	for i, r := range ranks {
		if r.GPU == nil {
			return nil, ""
		}
		g, ok := byIndex[*r.GPU]
		if !ok || g.CPUs == "" {
			return nil, ""
		}
		local, err := b.cpus(g.CPUs)
		if err != nil {
			return nil, fmt.Sprintf("GPU %d local CPUs %q are unreadable", g.Index, g.CPUs)
		}
		key := "cpus " + g.CPUs
		if g.NUMANode >= 0 {
			key = "numa " + strconv.Itoa(g.NUMANode)
		}
		gr := groups[key]
		if gr == nil {
			gr = &group{}
			groups[key] = gr
			order = append(order, key)
		}
		if !slices.Contains(gr.lists, g.CPUs) {
			gr.pool = cpuset.Union(gr.pool, local)
			gr.lists = append(gr.lists, g.CPUs)
		}
		gr.ranks = append(gr.ranks, i)
	}
	sets := make([][]int, len(ranks))
	var taken []int
	for _, key := range order {
		gr := groups[key]
		pool := cpuset.Subtract(cpuset.Intersect(gr.pool, allowed), taken)
		parts := cpuset.Split(pool, len(gr.ranks))
		if parts == nil {
			return nil, fmt.Sprintf("%d CPUs near the GPUs of %s cannot be split among %d ranks", len(pool), key, len(gr.ranks))
		}
		for j, ri := range gr.ranks {
			sets[ri] = parts[j]
		}
		taken = cpuset.Union(taken, pool)
	}
	return sets, ""
}

// listHosts names up to eight hosts and counts the rest, so a note stays
// one readable line on a thousand-node job.
func listHosts(hosts []string) string {
	const show = 8
	if len(hosts) <= show {
		return strings.Join(hosts, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(hosts[:show], ", "), len(hosts)-show)
}

// closingNotes records the job-wide remarks that do not belong to one
// decision above.
func (b *builder) closingNotes() {
	if b.cfg.RunPath {
		b.note(NoteWarn, "--run-path runs the script inside torchrun's own process, so per-rank CPU binding cannot be applied in the worker; ranks are not bound")
	} else if b.spec.Set("numa_binding") || b.cfg.NumaBinding != "" {
		b.note(NoteInfo, "--numa-binding=%s: torchrun binds each rank's CPUs itself, so gorun does not", b.cfg.NumaBinding)
	}
	b.leftToNCCLNotes()
	b.overrideNotes()
	if b.perNode() {
		b.note(NoteInfo, "torchrun runs with --max-restarts=0: when a worker fails, gorun stops this node's torchrun and starts a fresh one, up to --max-restarts=%d times; workers see the attempt number (0 first) in GORUN_RESTART_COUNT and TORCHELASTIC_RESTART_COUNT. Restarting every node together is for what started them (a JobSet's failure policy, a PyTorchJob's restart policy), which sees this gorun's exit code", b.cfg.MaxRestarts)
	} else {
		b.note(NoteInfo, "torchrun runs with --max-restarts=0: when any worker fails, gorun stops the whole group and starts a fresh torchrun on every node, up to --max-restarts=%d times; workers see the attempt number (0 first) in GORUN_RESTART_COUNT and TORCHELASTIC_RESTART_COUNT", b.cfg.MaxRestarts)
	}
	if !b.spec.Set("monitor_interval") {
		b.note(NoteInfo, "torchrun looks at its workers every 0.1 s (%s, torch 2.2's default): the 5 s of an older torchrun would hold a run whose workers have ended up to 5 s more (set --monitor-interval to choose)", monitorInterval)
	}
	if why := b.spec.Gorun.PrewarmSkipped; why != "" {
		b.note(NoteInfo, "no worker pool (--prewarm auto): %s, so each worker starts its own interpreter; --prewarm torch starts the pool anyway", why)
	}
	if mods := b.spec.Gorun.Prewarm; len(mods) > 0 {
		given := "--prewarm " + strings.Join(mods, ",")
		if b.spec.Gorun.PrewarmAuto {
			given = "--prewarm auto (no pool on a node without a CPU for its import beside torchrun's, nor a next attempt's pool where the CPUs the running attempt leaves idle, measured as it starts, cannot hold its import)"
		}
		b.note(NoteInfo, "%s: each node's agent imports %s once, beside torchrun, and forks one interpreter per local rank from that import, bound to the rank's CPUs, each waiting (CUDA untouched); each worker runs its script in one (its parent is the agent, its sys.orig_argv gorun's shim), so the import is paid while torchrun starts, not after. A worker whose interpreter, folder, CPUs or import-time variables differ starts cold, and the node says why once. The forked interpreters share the import's memory: a waiting pool costs the node about one interpreter with its imports (about 0.3 GB with torch 2.11)%s (--prewarm off: no pool)",
			given, strings.Join(mods, ", "), map[bool]string{true: ", twice that while a restart's pool waits beside the running workers", false: ""}[b.cfg.MaxRestarts > 0 && b.spec.Gorun.WarmRestart != "off"])
	}
	if b.cfg.MaxRestarts > 0 {
		switch b.spec.Gorun.WarmRestart {
		case "off":
			b.note(NoteInfo, "--warm-restart off: each restart starts torchrun cold, paying its import of torch")
		case "early":
			b.note(NoteInfo, "--warm-restart early: every node starts the next attempt's torchrun ahead (its interpreter, with torch.distributed.run imported) as its attempt starts, so that a crash at start-up restarts warm too; its import shares the CPUs with the attempt's own where the node has none to spare, and may slow its start. A torchrun that is not a Python script, or an import-time variable that changed, starts cold, and the node says why once")
		default:
			b.note(NoteInfo, "warm restarts: once a node's workers are past their imports (joined the store, or ended), or with the attempt where preflight found CPUs to spare, it starts the next attempt's torchrun ahead (its interpreter, with torch.distributed.run imported), which a restart hands its command line; a torchrun that is not a Python script, or an import-time variable that changed, starts cold, and the node says why once (--warm-restart early: with the attempt on every node; off: always cold)")
		}
	}
}

// overrideNotes warns, once per variable, where a user value replaced a
// value gorun would have set.
func (b *builder) overrideNotes() {
	for _, name := range slices.Sorted(maps.Keys(b.override)) {
		o := b.override[name]
		u := b.userEnv[name]
		b.note(NoteWarn, "%s=%s (%s) overrides gorun's %s=%s (%s) on %s", name, u.Value, u.Reason, name, o.gorun.Value, o.gorun.Reason, listHosts(o.hosts))
	}
}

// overridden records the nodes where a user value replaced gorun's decision,
// and gorun's value on the first of them.
type overridden struct {
	hosts []string
	gorun Var
}

// monitorInterval is how often torchrun looks at its workers where the
// user set nothing (neither --monitor-interval nor PET_MONITOR_INTERVAL):
// torch 2.2's default, so that an older torchrun, whose default is 5 s,
// does not hold a run whose workers have all ended for up to 5 s more.
// Its workers see nothing of it.
const monitorInterval = "--monitor_interval=0.1"

// ownOptions are the torchrun options gorun adds on every node, in local
// and head-node mode alike: --max_restarts=0, since gorun restarts the
// group itself with a fresh torchrun (a PET_MAX_RESTARTS in the
// environment is overridden too), and monitorInterval where the user set
// none.
func (b *builder) ownOptions() []string {
	opts := []string{"--max_restarts=0"}
	if !b.spec.Set("monitor_interval") {
		opts = append(opts, monitorInterval)
	}
	return opts
}

// command returns the torchrun argv of node i. Local mode passes the
// user's options through as given; head-node mode first writes what gorun
// decides per node, then the user's other options untouched, in their
// order, and ends with the script and its arguments.
func (b *builder) command(h hosts.Host, i, nproc int, nprocKnown bool) []string {
	argv := strings.Fields(b.spec.Gorun.Torchrun)
	if len(argv) == 0 {
		argv = []string{"torchrun"}
	}
	if !b.head {
		for _, a := range b.spec.Given {
			// torchrun reads PET_* from the inherited environment itself;
			// gorun handles the signals (a torchrun that caught SIGUSR1
			// would stop its workers).
			if !a.FromEnv && a.Dest != "max_restarts" && a.Dest != "signals_to_handle" {
				argv = appendArg(argv, a)
			}
		}
		argv = append(argv, b.ownOptions()...)
		return append(append(argv, b.cfg.TrainingScript), b.cfg.TrainingScriptArgs...)
	}

	decided := map[string]bool{"nnodes": true, "max_restarts": true, "signals_to_handle": true}
	nnodes := strconv.Itoa(b.nnodesMax)
	if b.static {
		nnodes = strconv.Itoa(len(b.hosts)) // see checkNNodes
	} else if b.nnodesMin != b.nnodesMax {
		nnodes = fmt.Sprintf("%d:%d", b.nnodesMin, b.nnodesMax)
	}
	argv = append(argv, "--nnodes="+nnodes)
	if h.Slots > 0 {
		decided["nproc_per_node"] = true
		argv = append(argv, "--nproc_per_node="+strconv.Itoa(h.Slots))
		if b.spec.Set("nproc_per_node") && b.cfg.NProcPerNode != strconv.Itoa(h.Slots) {
			b.slotsOver = append(b.slotsOver, h.Name)
		}
	}
	if b.static {
		decided["node_rank"] = true
		argv = append(argv, "--node_rank="+strconv.Itoa(i))
		if !b.endpoint {
			decided["master_addr"], decided["master_port"] = true, true
			argv = append(argv, "--master_addr="+b.masterAddr.Value, "--master_port="+b.masterPort.Value)
		}
	}
	argv = append(argv, b.ownOptions()...)
	for _, a := range b.spec.Given {
		if !decided[a.Dest] {
			argv = appendArg(argv, a)
		}
	}
	return append(append(argv, b.cfg.TrainingScript), b.cfg.TrainingScriptArgs...)
}

// appendArg appends one user option: "--name=value" for long options (a
// value starting with '-' stays attached), "-x value" for short ones
// (argparse would keep the '=' of "-x=value"). Long names are written in
// their underscore spelling ("--nproc_per_node"), the one every torchrun
// accepts: 2.x takes both, 1.x only that one.
func appendArg(argv []string, a cmdline.Arg) []string {
	name := a.Name
	if name == "" || strings.HasPrefix(name, "--") {
		name = "--" + a.Dest
	}
	switch {
	case a.IsFlag:
		return append(argv, name)
	case strings.HasPrefix(name, "--"):
		return append(argv, name+"="+a.Value)
	default:
		return append(argv, name, a.Value)
	}
}

// headNotes explains the head-node mode decisions that argv cannot.
func (b *builder) headNotes() {
	if !b.head {
		return
	}
	if b.static && b.spec.Set("node_rank") {
		b.note(NoteWarn, "--node-rank=%d is replaced by each node's position in the host list", b.cfg.NodeRank)
	}
	if !b.static && len(b.hosts) > 1 {
		b.note(NoteInfo, "global ranks are decided by the rendezvous when the nodes join (rank -1 in the plan)")
	}
	b.note(NoteInfo, "every worker reads /dev/null as stdin: gorun passes its own stdin only in local mode, to local rank 0")
}

// perNodeNotes says, in local mode with more than one node or a node rank
// (one gorun per Kubernetes pod, or per Slurm task), that the plan is this
// node's alone: the other nodes run their own gorun, and their checks,
// plans and output are theirs.
func (b *builder) perNodeNotes() {
	if !b.perNode() {
		return
	}
	which := fmt.Sprintf("node %d of %s", b.cfg.NodeRank, nodesText(b.nnodesMin, b.nnodesMax))
	if !b.static {
		which = fmt.Sprintf("one of %s, ranked by the %s rendezvous", nodesText(b.nnodesMin, b.nnodesMax), b.cfg.RdzvBackend)
	}
	b.note(NoteInfo, "this plan is one node's: gorun runs torchrun on this node only (%s); the other nodes run their own gorun (one per pod or per Slurm task), outside this gorun's reach: their checks, plans and output are theirs", which)
}

// perNode: local mode, one node of several that this gorun does not start.
func (b *builder) perNode() bool {
	return !b.head && !b.cfg.Standalone && (b.nnodesMax > 1 || b.spec.Set("node_rank"))
}

func nodesText(lo, hi int) string {
	if lo != hi {
		return fmt.Sprintf("%d to %d nodes", lo, hi)
	}
	return fmt.Sprintf("%d node%s", hi, plural(hi))
}

// fewestCPUs returns the size of the smallest CPU set among ranks, or 0
// when some rank is not bound.
func fewestCPUs(ranks []RankPlan, sets [][]int) int {
	fewest := 0
	for i := range ranks {
		if i >= len(sets) || len(sets[i]) == 0 {
			return 0
		}
		if fewest == 0 || len(sets[i]) < fewest {
			fewest = len(sets[i])
		}
	}
	return fewest
}

// mixedSlots refuses a host list where some hosts have a slot count and
// others none, unless --nproc-per-node says what those get: "n1:8,n2"
// would start 8 workers on n1 and --nproc-per-node's default, 1, on n2.
func mixedSlots(hs []hosts.Host, spec Spec) error {
	var with, without []string
	for _, h := range hs {
		if h.Slots > 0 {
			with = append(with, fmt.Sprintf("%s:%d", h.Name, h.Slots))
		} else {
			without = append(without, h.Name)
		}
	}
	if len(with) == 0 || len(without) == 0 || spec.Set("nproc_per_node") {
		return nil
	}
	return &userr.InputError{
		Where:   "the host list",
		Problem: fmt.Sprintf("%s has a slot count and %s none, which would get --nproc-per-node's default, 1", with[0], without[0]),
		Fix:     fmt.Sprintf("give every host its count (%s:N), or --nproc-per-node N for the hosts without one", without[0]),
	}
}

// slotSource names where implied slot counts came from.
func slotSource(spec Spec) string {
	if spec.Gorun.Hostfile != "" {
		return "hostfile " + spec.Gorun.Hostfile
	}
	return "Slurm allocation"
}

// slotsGiven returns the spec's hosts, without the slot counts an explicit
// --nproc-per-node wins over: those no flag gave (Host.Implied: a
// hostfile's, the Slurm allocation's), and the hosts whose count it
// replaced with another.
func slotsGiven(spec Spec) (out []hosts.Host, replaced []string) {
	if !spec.Set("nproc_per_node") {
		return spec.Hosts, nil
	}
	out = slices.Clone(spec.Hosts)
	for i := range out {
		if out[i].Implied {
			if strconv.Itoa(out[i].Slots) != spec.Torchrun.NProcPerNode {
				replaced = append(replaced, fmt.Sprintf("%s:%d", out[i].Name, out[i].Slots))
			}
			out[i].Slots = 0
		}
	}
	return out, replaced
}
