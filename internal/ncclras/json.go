package ncclras

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The JSON dump, as src/ras/client_support.cc writes it (rasDumpCommsToJSON,
// jsonWriteHeader, jsonStartCommunicator, jsonWriteRankData,
// jsonWriteMissingRank, jsonWriteFooter).
type jsonComm struct {
	Hash  string `json:"hash"` // "0x%lx"
	Size  int    `json:"size"`
	Ranks []struct {
		jsonProcess
		Status struct {
			InitState      int  `json:"init_state"`
			AsyncError     int  `json:"async_error"`
			FinalizeCalled bool `json:"finalize_called"`
			DestroyFlag    bool `json:"destroy_flag"`
			AbortFlag      bool `json:"abort_flag"`
		} `json:"status"`
		CollectiveCounts map[string]uint64 `json:"collective_counts"`
	} `json:"ranks"`
	MissingRanks []struct {
		jsonProcess
		Status struct {
			Unresponsive   bool `json:"unresponsive"`
			ConsideredDead bool `json:"considered_dead"`
		} `json:"status"`
	} `json:"missing_ranks"`
}

type jsonProcess struct {
	Rank    int    `json:"rank"`
	Host    string `json:"host"` // "unknown" when RAS does not know the process
	PID     int    `json:"pid"`  // -1 likewise
	CudaDev int    `json:"cuda_dev"`
	NvmlDev int    `json:"nvml_dev"`
}

func (j jsonProcess) rank() Rank {
	rk := Rank{Rank: j.Rank, GPU: strconv.Itoa(j.CudaDev)}
	if j.CudaDev != j.NvmlDev { // rasGpuToString
		rk.GPU += fmt.Sprintf(" (NVML %d)", j.NvmlDev)
	}
	if j.PID > 0 && j.Host != "unknown" {
		rk.Node, rk.PID = j.Host, j.PID
	}
	return rk
}

// NCCL's ncclResult_t values that are not errors in a rank's state.
const (
	ncclSuccess    = 0
	ncclInProgress = 7
)

// statusOrder orders the states as NCCL's statusStr does: a communicator
// shows the highest of its ranks'.
func statusOrder(status string) int {
	return slices.Index([]string{"NOCOMM", "INIT", "RUNNING", "FINALIZE", "ABORT"}, status)
}

func parseJSON(text string) Report {
	r := Report{JSON: true}
	// A token walk rather than one Unmarshal, so that a dump cut short
	// still gives the communicators before the cut.
	dec := json.NewDecoder(strings.NewReader(text))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return r
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return r
		}
		switch t {
		case "nccl_version":
			err = dec.Decode(&r.NCCLVersion)
		case "communicators":
			err = decodeComms(dec, &r)
		case "ras":
			var ras struct {
				TimeoutsCount int `json:"timeouts_count"`
			}
			err = dec.Decode(&ras)
			r.Timeouts = ras.TimeoutsCount
		default:
			var skip json.RawMessage
			err = dec.Decode(&skip)
		}
		if err != nil {
			return r
		}
	}
	t, err := dec.Token()
	r.Complete = err == nil && t == json.Delim('}')
	return r
}

func decodeComms(dec *json.Decoder, r *Report) error {
	if t, err := dec.Token(); err != nil || t != json.Delim('[') {
		return fmt.Errorf("communicators: not an array")
	}
	unreachable := make(map[Process]bool)
	for dec.More() {
		var jc jsonComm
		if err := dec.Decode(&jc); err != nil {
			return err
		}
		c := commFromJSON(jc)
		for _, m := range jc.MissingRanks {
			rk := m.rank()
			if m.Status.Unresponsive && rk.PID != 0 {
				unreachable[Process{PID: rk.PID, Node: rk.Node, Dead: m.Status.ConsideredDead}] = true
			}
		}
		r.Comms = append(r.Comms, c)
	}
	for p := range unreachable {
		r.Unreachable = append(r.Unreachable, p)
		if p.Dead {
			r.DeadProcesses++
		} else {
			r.MissingProcesses++
		}
	}
	slices.SortFunc(r.Unreachable, func(a, b Process) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.PID, b.PID))
	})
	_, err := dec.Token() // ']'
	return err
}

// commFromJSON fills in what the text report would say of the communicator:
// its groups of counts and states, and its status and errors as
// rasClientRunComms works them out.
func commFromJSON(jc jsonComm) Comm {
	c := Comm{Size: jc.Size}
	if h, err := strconv.ParseUint(strings.TrimPrefix(jc.Hash, "0x"), 16, 64); err == nil {
		c.Hash = fmt.Sprintf("%016x", h)
	}
	const (
		mismatch = 1 << iota
		failed
		incomplete
	)
	errs := 0
	nodes := make(map[string]bool)
	counts := make(map[string]map[uint64][]int)
	statuses := make(map[string][]int)
	for _, jr := range jc.Ranks {
		rk := jr.rank()
		c.Ranks = append(c.Ranks, rk)
		if rk.Node != "" {
			nodes[rk.Node] = true
		}
		st := jr.Status
		switch {
		case st.AbortFlag:
			statuses["ABORT"] = append(statuses["ABORT"], jr.Rank)
		case st.FinalizeCalled || st.DestroyFlag:
			statuses["FINALIZE"] = append(statuses["FINALIZE"], jr.Rank)
		case st.InitState == ncclSuccess:
			statuses["RUNNING"] = append(statuses["RUNNING"], jr.Rank)
		default:
			statuses["INIT"] = append(statuses["INIT"], jr.Rank)
		}
		if (st.InitState != ncclSuccess && st.InitState != ncclInProgress) ||
			(st.AsyncError != ncclSuccess && st.AsyncError != ncclInProgress) {
			errs |= failed
			c.Failed = append(c.Failed, jr.Rank)
		}
		for op, n := range jr.CollectiveCounts {
			if counts[op] == nil {
				counts[op] = make(map[uint64][]int)
			}
			counts[op][n] = append(counts[op][n], jr.Rank)
		}
	}
	for _, m := range jc.MissingRanks {
		c.Ranks = append(c.Ranks, m.rank())
		if m.Status.Unresponsive {
			errs |= incomplete
			c.Missing = append(c.Missing, m.Rank)
		} else {
			// It answered, but not as a member of this communicator.
			statuses["NOCOMM"] = append(statuses["NOCOMM"], m.Rank)
		}
	}
	c.Nodes = len(nodes)

	for op, byCount := range counts {
		if len(byCount) > 1 {
			errs |= mismatch
		}
		for n, ranks := range byCount {
			c.Counts = append(c.Counts, Count{Op: op, Count: n, NRanks: len(ranks), Ranks: sortedUnique(ranks)})
		}
	}
	// As the text report lists them: by type, then most common first.
	slices.SortFunc(c.Counts, func(a, b Count) int {
		return cmp.Or(cmp.Compare(a.Op, b.Op), cmp.Compare(b.NRanks, a.NRanks), cmp.Compare(b.Count, a.Count))
	})
	if len(statuses) > 1 {
		errs |= mismatch
	}
	for s, ranks := range statuses {
		c.Statuses = append(c.Statuses, Status{Status: s, NRanks: len(ranks), Ranks: sortedUnique(ranks)})
		if c.Status == "" || statusOrder(s) > statusOrder(c.Status) {
			c.Status = s
		}
	}
	slices.SortFunc(c.Statuses, func(a, b Status) int {
		return cmp.Or(cmp.Compare(b.NRanks, a.NRanks), cmp.Compare(statusOrder(b.Status), statusOrder(a.Status)))
	})
	// NCCL's errorStr: "INCOMPLETE,ERROR,MISMATCH" and its subsets.
	var names []string
	for _, e := range []struct {
		bit  int
		name string
	}{{incomplete, "INCOMPLETE"}, {failed, "ERROR"}, {mismatch, "MISMATCH"}} {
		if errs&e.bit != 0 {
			names = append(names, e.name)
		}
	}
	c.Errors = "OK"
	if len(names) > 0 {
		c.Errors = strings.Join(names, ",")
	}
	return c
}
