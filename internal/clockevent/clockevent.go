// Package clockevent names the bits of NVML's clock-event reasons, the
// mask nvmlDeviceGetCurrentClocksEventReasons returns, so that preflight's
// findings and the telemetry JSONL call each bit the same thing.
//
// A bit's name is NVML's own constant, nvmlClocksEventReason<Name> (or the
// older nvmlClocksThrottleReason<Name> where NVML kept only that), in
// snake_case: nvmlClocksEventReasonSwThermalSlowdown is
// "sw_thermal_slowdown". The package does no I/O and holds no state; it
// does not import go-nvml (the bit values are NVML's ABI, checked against
// go-nvml in the tests), so pure code may use it.
package clockevent

// Reason is one bit of the clock-event reasons mask.
type Reason uint64

// The reasons, with the values of nvml.h.
const (
	GpuIdle                   Reason = 1 << iota // nvmlClocksEventReasonGpuIdle
	ApplicationsClocksSetting                    // nvmlClocksEventReasonApplicationsClocksSetting
	SwPowerCap                                   // nvmlClocksEventReasonSwPowerCap
	HwSlowdown                                   // nvmlClocksThrottleReasonHwSlowdown
	SyncBoost                                    // nvmlClocksEventReasonSyncBoost
	SwThermalSlowdown                            // nvmlClocksEventReasonSwThermalSlowdown
	HwThermalSlowdown                            // nvmlClocksThrottleReasonHwThermalSlowdown
	HwPowerBrakeSlowdown                         // nvmlClocksThrottleReasonHwPowerBrakeSlowdown
	DisplayClockSetting                          // nvmlClocksEventReasonDisplayClockSetting
	BoardLimit                                   // nvmlClocksEventReasonBoardLimit
	Reliability                                  // nvmlClocksEventReasonReliability

	// All is every reason this package names (nvmlClocksEventReasonAll).
	All = Reliability<<1 - 1
	// Slowdowns are the reasons that mean a fault or a cooling or power
	// problem. Power capping, idling, sync boost and the clock settings
	// are normal operation.
	Slowdowns = HwSlowdown | SwThermalSlowdown | HwThermalSlowdown | HwPowerBrakeSlowdown
)

// String returns r's name ("sw_thermal_slowdown"), or "" for a value that
// is not exactly one known bit.
func (r Reason) String() string {
	switch r {
	case GpuIdle:
		return "gpu_idle"
	case ApplicationsClocksSetting:
		return "applications_clocks_setting"
	case SwPowerCap:
		return "sw_power_cap"
	case HwSlowdown:
		return "hw_slowdown"
	case SyncBoost:
		return "sync_boost"
	case SwThermalSlowdown:
		return "sw_thermal_slowdown"
	case HwThermalSlowdown:
		return "hw_thermal_slowdown"
	case HwPowerBrakeSlowdown:
		return "hw_power_brake_slowdown"
	case DisplayClockSetting:
		return "display_clock_setting"
	case BoardLimit:
		return "board_limit"
	case Reliability:
		return "reliability"
	}
	return ""
}

// Names returns the names of the known reasons set in mask, lowest bit
// first. Bits NVML may add later are left out; an empty mask gives nil.
func Names(mask uint64) []string {
	var names []string
	for r := GpuIdle; r <= Reliability; r <<= 1 {
		if mask&uint64(r) != 0 {
			names = append(names, r.String())
		}
	}
	return names
}

// IsSlowdown reports whether name is the name of one of Slowdowns.
func IsSlowdown(name string) bool {
	for r := GpuIdle; r <= Reliability; r <<= 1 {
		if r&Slowdowns != 0 && r.String() == name {
			return true
		}
	}
	return false
}
