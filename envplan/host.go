package envplan

// Host is one node of the job, in launch order.
type Host struct {
	Name  string `json:"host"`
	Slots int    `json:"slots"` // processes (GPUs) to start there; 0 means not stated
	GPUs  []int  `json:"gpus"`  // GPU ids to use; nil means unknown (all of them)
}
