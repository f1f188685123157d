package agent

import (
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/gpu"
)

// metricsView is what the collectors read: a copy taken under the lock.
type metricsView struct {
	node, hostname, driver string
	devices                []gpu.Device
	// nvlinkRate is each GPU's NVLink data rate over the last two samples,
	// bytes per second transmitted and received.
	nvlinkRate   map[string][2]float64
	inventory    []gpufleet.NodeGPU
	latest       map[string]gpu.Sample
	latestAt     time.Time
	sampleOK     bool
	sampleDur    time.Duration
	holders      map[string]Holder
	xidCount     map[string]map[int]float64
	lastXID      map[string]int
	beats, fails float64
	lastOK       time.Time
	fenced       bool
	attempts     map[gpufleet.AttemptState]int
	allocated    map[string]float64
}

// view snapshots what the metrics need.
func (a *Agent) view() metricsView {
	holders, counts, holds := a.runner.Holders(), a.runner.Counts(), a.runner.Holds()
	a.mu.Lock()
	defer a.mu.Unlock()
	v := metricsView{node: a.cfg.Name, hostname: a.cfg.Name, driver: a.versions.Driver, devices: slices.Clone(a.devices),
		inventory: slices.Clone(a.inventory), latest: maps.Clone(a.latest), latestAt: a.latestAt, sampleOK: a.sampleOK,
		sampleDur: a.sampleDur, nvlinkRate: maps.Clone(a.nvlinkRate), holders: holders, xidCount: map[string]map[int]float64{}, lastXID: maps.Clone(a.lastXID),
		beats: a.beats, fails: a.fails, lastOK: a.lastOK, fenced: a.fenced, attempts: counts, allocated: map[string]float64{}}
	for k, m := range a.xidCount {
		v.xidCount[k] = maps.Clone(m)
	}
	for _, h := range holds {
		v.allocated[h.GPU] += h.Share
		if h.Device != "" && h.Device != h.GPU { // a MIG instance: its own share of it
			v.allocated[h.Device] += h.Share / migShareOf(v.devices, h.Device)
		}
	}
	return v
}

// Collectors returns the agent's Prometheus collectors: the native
// gpufleet_* set and the dcgm-exporter-compatible DCGM_FI_* set.
func (a *Agent) Collectors() []prometheus.Collector {
	return []prometheus.Collector{NativeCollector(a.view), DCGMCollector(a.view)}
}

// gpuLabels are the labels of every native per-GPU series.
var gpuLabels = []string{"node", "gpu", "uuid", "model", "team", "job", "priority"}

// migLabels are those of the native per-MIG-instance series: the GPU's,
// with the holder of the instance, then the instance's UUID, GPU instance
// id and profile.
var migLabels = append(slices.Clone(gpuLabels), "mig_uuid", "gpu_instance_id", "gpu_instance_profile")

func migGauge(name, help string) desc {
	return desc{prometheus.NewDesc(name, help, migLabels, nil), prometheus.GaugeValue}
}

type desc struct {
	d   *prometheus.Desc
	typ prometheus.ValueType
}

func gauge(name, help string, extra ...string) desc {
	return desc{prometheus.NewDesc(name, help, append(slices.Clone(gpuLabels), extra...), nil), prometheus.GaugeValue}
}

func counter(name, help string, extra ...string) desc {
	return desc{prometheus.NewDesc(name, help, append(slices.Clone(gpuLabels), extra...), nil), prometheus.CounterValue}
}

// nativeDescs are the native metrics, in base units. A reading the GPU
// does not report is not exported.
var nativeDescs = struct {
	info, util, memUtil, sm, occ, tensor, dram, memUsed, memFree, memTotal, power, powerLimit, energy,
	temp, memTemp, smClock, memClock, clockEvent, powerViol, thermViol, ecc, remapped, remapPending, remapFailure,
	pcieGen, pcieWidth, pcieReplay, nvlinkUp, nvlinkTotal, nvlinkErr, xid, health, allocated,
	encUtil, decUtil, pcieTx, pcieRx, nvlinkTx, nvlinkRx, migInfo, migMemTotal, migMemUsed, migMemFree, migAllocated desc
	up, scrapeOK, scrapeDur, sampleAge, beats, beatFails, lastBeat, fenced, attempts *prometheus.Desc
}{
	info:         gauge("gpufleet_gpu_info", "GPU identity; always 1.", "name", "pci_bus_id", "nvlink_domain", "driver"),
	util:         gauge("gpufleet_gpu_utilization_ratio", "Fraction of time a kernel ran (0-1)."),
	memUtil:      gauge("gpufleet_gpu_memory_utilization_ratio", "Fraction of time device memory was read or written (0-1)."),
	sm:           gauge("gpufleet_gpu_sm_active_ratio", "Fraction of SM cycles with a warp resident (GPM; 0-1)."),
	occ:          gauge("gpufleet_gpu_sm_occupancy_ratio", "Resident warps over the maximum (GPM; 0-1)."),
	tensor:       gauge("gpufleet_gpu_tensor_active_ratio", "Fraction of cycles the tensor pipes were busy (GPM; 0-1)."),
	dram:         gauge("gpufleet_gpu_dram_active_ratio", "Fraction of cycles device memory was busy (GPM; 0-1)."),
	memUsed:      gauge("gpufleet_gpu_memory_used_bytes", "Device memory in use."),
	memFree:      gauge("gpufleet_gpu_memory_free_bytes", "Device memory free."),
	memTotal:     gauge("gpufleet_gpu_memory_total_bytes", "Device memory."),
	power:        gauge("gpufleet_gpu_power_watts", "Power draw."),
	powerLimit:   gauge("gpufleet_gpu_power_limit_watts", "Enforced power limit."),
	energy:       counter("gpufleet_gpu_energy_joules_total", "Energy consumed since the driver loaded."),
	temp:         gauge("gpufleet_gpu_temperature_celsius", "GPU core temperature."),
	memTemp:      gauge("gpufleet_gpu_memory_temperature_celsius", "HBM temperature."),
	smClock:      gauge("gpufleet_gpu_sm_clock_hertz", "SM clock."),
	memClock:     gauge("gpufleet_gpu_memory_clock_hertz", "Memory clock."),
	clockEvent:   gauge("gpufleet_gpu_clock_event_active", "1 while a clock-event (throttle) reason is active.", "reason"),
	powerViol:    counter("gpufleet_gpu_power_violation_seconds_total", "Time clocks were held down by the power limit."),
	thermViol:    counter("gpufleet_gpu_thermal_violation_seconds_total", "Time clocks were held down by temperature."),
	ecc:          counter("gpufleet_gpu_ecc_errors_total", "ECC errors since the driver loaded (volatile).", "kind"),
	remapped:     gauge("gpufleet_gpu_remapped_rows", "Rows remapped over the GPU's life.", "kind"),
	remapPending: gauge("gpufleet_gpu_row_remap_pending", "1 while a row remap waits for a GPU reset."),
	remapFailure: gauge("gpufleet_gpu_row_remap_failure", "1 after a row remap failed."),
	pcieGen:      gauge("gpufleet_gpu_pcie_link_generation", "Current PCIe link generation."),
	pcieWidth:    gauge("gpufleet_gpu_pcie_link_width", "Current PCIe link width (lanes)."),
	pcieReplay:   counter("gpufleet_gpu_pcie_replays_total", "PCIe replays."),
	nvlinkUp:     gauge("gpufleet_gpu_nvlink_links_up", "NVLink links up."),
	nvlinkTotal:  gauge("gpufleet_gpu_nvlink_links", "NVLink links of the GPU."),
	nvlinkErr:    counter("gpufleet_gpu_nvlink_errors_total", "NVLink CRC, replay and recovery errors."),
	xid:          counter("gpufleet_gpu_xid_errors_total", "XID events seen by this agent.", "xid"),
	health:       gauge("gpufleet_gpu_health", "1 for the GPU's current health (healthy, degraded, unhealthy).", "health"),
	allocated:    gauge("gpufleet_gpu_allocated_ratio", "Share of the GPU held by running attempts (0-1; MIG slices/7, time-slice fractions)."),
	encUtil:      gauge("gpufleet_gpu_encoder_utilization_ratio", "Fraction of time the video encoder (NVENC) was busy (0-1)."),
	decUtil:      gauge("gpufleet_gpu_decoder_utilization_ratio", "Fraction of time the video decoder (NVDEC) was busy (0-1)."),
	pcieTx:       gauge("gpufleet_gpu_pcie_transmit_bytes_per_second", "PCIe traffic from the GPU, over NVML's 20 ms window."),
	pcieRx:       gauge("gpufleet_gpu_pcie_receive_bytes_per_second", "PCIe traffic to the GPU, over NVML's 20 ms window."),
	nvlinkTx:     counter("gpufleet_gpu_nvlink_transmit_bytes_total", "NVLink data bytes sent over all links."),
	nvlinkRx:     counter("gpufleet_gpu_nvlink_receive_bytes_total", "NVLink data bytes received over all links."),
	migInfo:      migGauge("gpufleet_mig_instance_info", "MIG instance identity; always 1."),
	migMemTotal:  migGauge("gpufleet_mig_memory_total_bytes", "Device memory of the MIG instance."),
	migMemUsed:   migGauge("gpufleet_mig_memory_used_bytes", "Device memory in use in the MIG instance."),
	migMemFree:   migGauge("gpufleet_mig_memory_free_bytes", "Device memory free in the MIG instance."),
	migAllocated: migGauge("gpufleet_mig_allocated_ratio", "Share of the MIG instance held by running attempts (0-1)."),
	up:           prometheus.NewDesc("gpufleet_agent_gpus", "GPUs the agent knows.", []string{"node"}, nil),
	scrapeOK:     prometheus.NewDesc("gpufleet_agent_scrape_success", "1 if the last GPU read succeeded.", []string{"node"}, nil),
	scrapeDur:    prometheus.NewDesc("gpufleet_agent_scrape_duration_seconds", "Duration of the last GPU read.", []string{"node"}, nil),
	sampleAge:    prometheus.NewDesc("gpufleet_agent_sample_age_seconds", "Age of the readings exported.", []string{"node"}, nil),
	beats:        prometheus.NewDesc("gpufleet_agent_heartbeats_total", "Successful heartbeats.", []string{"node"}, nil),
	beatFails:    prometheus.NewDesc("gpufleet_agent_heartbeat_failures_total", "Failed heartbeats.", []string{"node"}, nil),
	lastBeat:     prometheus.NewDesc("gpufleet_agent_last_heartbeat_timestamp_seconds", "When the last heartbeat succeeded.", []string{"node"}, nil),
	fenced:       prometheus.NewDesc("gpufleet_agent_fenced", "1 while the agent has fenced itself.", []string{"node"}, nil),
	attempts:     prometheus.NewDesc("gpufleet_agent_attempts", "Attempts the agent holds, by state.", []string{"node", "state"}, nil),
}

// collector adapts a function to prometheus.Collector ("unchecked": its
// series vary with the hardware, so Describe sends nothing).
type collector func(ch chan<- prometheus.Metric)

func (c collector) Describe(chan<- *prometheus.Desc)    {}
func (c collector) Collect(ch chan<- prometheus.Metric) { c(ch) }

// NativeCollector exports gpufleet_gpu_* and gpufleet_agent_* from src.
func NativeCollector(src func() metricsView) prometheus.Collector {
	return collector(func(ch chan<- prometheus.Metric) {
		v := src()
		D := &nativeDescs
		inv := map[string]gpufleet.NodeGPU{}
		for _, g := range v.inventory {
			inv[g.UUID] = g
		}
		for _, d := range v.devices {
			h := v.holders[d.UUID]
			lv := []string{v.node, strconv.Itoa(d.Index), d.UUID, d.Model, h.Team, h.Job, h.Priority}
			emit := func(m desc, val float64, extra ...string) {
				ch <- prometheus.MustNewConstMetric(m.d, m.typ, val, append(slices.Clone(lv), extra...)...)
			}
			f := func(m desc, p *float64, scale float64) {
				if p != nil {
					emit(m, *p*scale)
				}
			}
			u := func(m desc, p *uint64, scale float64) {
				if p != nil {
					emit(m, float64(*p)*scale)
				}
			}
			b := func(m desc, p *bool) {
				if p != nil {
					emit(m, boolf(*p))
				}
			}
			emit(D.info, 1, d.Name, d.PCIBusID, d.NVLinkDomain, v.driver)
			emit(D.memTotal, float64(d.MemoryBytes))
			emit(D.allocated, v.allocated[d.UUID])
			if g, ok := inv[d.UUID]; ok {
				emit(D.health, 1, string(g.Health))
			}
			for xid, n := range v.xidCount[d.UUID] {
				emit(D.xid, n, strconv.Itoa(xid))
			}
			s, ok := v.latest[d.UUID]
			if !ok {
				continue
			}
			f(D.util, s.Utilization, 1)
			f(D.memUtil, s.MemoryUtilization, 1)
			f(D.sm, s.SMActivity, 1)
			f(D.occ, s.SMOccupancy, 1)
			f(D.tensor, s.TensorActivity, 1)
			f(D.dram, s.DRAMActivity, 1)
			if s.MemoryUsedBytes != nil {
				emit(D.memUsed, float64(*s.MemoryUsedBytes))
			}
			if s.MemoryFreeBytes != nil {
				emit(D.memFree, float64(*s.MemoryFreeBytes))
			}
			f(D.power, s.PowerWatts, 1)
			f(D.powerLimit, s.PowerLimitWatts, 1)
			u(D.energy, s.EnergyMillijoules, 1e-3)
			f(D.temp, s.TemperatureC, 1)
			f(D.memTemp, s.MemoryTemperatureC, 1)
			f(D.smClock, s.SMClockMHz, 1e6)
			f(D.memClock, s.MemoryClockMHz, 1e6)
			if s.ClockEventReasons != nil {
				for _, t := range throttleNames {
					emit(D.clockEvent, boolf(*s.ClockEventReasons&t.bit != 0), t.name)
				}
			}
			u(D.powerViol, s.PowerViolationNs, 1e-9)
			u(D.thermViol, s.ThermalViolationNs, 1e-9)
			if s.ECCCorrectedVolatile != nil {
				emit(D.ecc, float64(*s.ECCCorrectedVolatile), "corrected")
			}
			if s.ECCUncorrectedVolatile != nil {
				emit(D.ecc, float64(*s.ECCUncorrectedVolatile), "uncorrected")
			}
			if s.RemappedRowsCorrectable != nil {
				emit(D.remapped, float64(*s.RemappedRowsCorrectable), "correctable")
			}
			if s.RemappedRowsUncorrectable != nil {
				emit(D.remapped, float64(*s.RemappedRowsUncorrectable), "uncorrectable")
			}
			b(D.remapPending, s.RowRemapPending)
			b(D.remapFailure, s.RowRemapFailure)
			if s.PCIeGen != nil {
				emit(D.pcieGen, float64(*s.PCIeGen))
			}
			if s.PCIeWidth != nil {
				emit(D.pcieWidth, float64(*s.PCIeWidth))
			}
			u(D.pcieReplay, s.PCIeReplayCount, 1)
			if s.NVLinkLinksUp != nil {
				emit(D.nvlinkUp, float64(*s.NVLinkLinksUp))
			}
			if s.NVLinkLinksTotal != nil {
				emit(D.nvlinkTotal, float64(*s.NVLinkLinksTotal))
			}
			u(D.nvlinkErr, s.NVLinkErrors, 1)
			f(D.encUtil, s.EncoderUtilization, 1)
			f(D.decUtil, s.DecoderUtilization, 1)
			f(D.pcieTx, s.PCIeTxBytesPerSecond, 1)
			f(D.pcieRx, s.PCIeRxBytesPerSecond, 1)
			u(D.nvlinkTx, s.NVLinkTxBytes, 1)
			u(D.nvlinkRx, s.NVLinkRxBytes, 1)
		}
		for _, d := range v.devices {
			migReadings := map[string]gpu.MIGSample{}
			for _, m := range v.latest[d.UUID].MIG {
				migReadings[m.UUID] = m
			}
			for _, m := range d.MIG {
				h := v.holders[m.UUID]
				lv := []string{v.node, strconv.Itoa(d.Index), d.UUID, d.Model, h.Team, h.Job, h.Priority, m.UUID, strconv.Itoa(m.GPUInstanceID), m.Profile}
				emit := func(md desc, val float64) { ch <- prometheus.MustNewConstMetric(md.d, md.typ, val, lv...) }
				emit(D.migInfo, 1)
				emit(D.migMemTotal, float64(m.MemoryBytes))
				emit(D.migAllocated, v.allocated[m.UUID])
				if r, ok := migReadings[m.UUID]; ok {
					if r.MemoryUsedBytes != nil {
						emit(D.migMemUsed, float64(*r.MemoryUsedBytes))
					}
					if r.MemoryFreeBytes != nil {
						emit(D.migMemFree, float64(*r.MemoryFreeBytes))
					}
				}
			}
		}
		node := func(d *prometheus.Desc, t prometheus.ValueType, val float64) {
			ch <- prometheus.MustNewConstMetric(d, t, val, v.node)
		}
		node(D.up, prometheus.GaugeValue, float64(len(v.devices)))
		node(D.scrapeOK, prometheus.GaugeValue, boolf(v.sampleOK))
		node(D.scrapeDur, prometheus.GaugeValue, v.sampleDur.Seconds())
		if !v.latestAt.IsZero() {
			node(D.sampleAge, prometheus.GaugeValue, time.Since(v.latestAt).Seconds())
		}
		node(D.beats, prometheus.CounterValue, v.beats)
		node(D.beatFails, prometheus.CounterValue, v.fails)
		if !v.lastOK.IsZero() {
			node(D.lastBeat, prometheus.GaugeValue, float64(v.lastOK.UnixNano())/1e9)
		}
		node(D.fenced, prometheus.GaugeValue, boolf(v.fenced))
		for _, st := range []gpufleet.AttemptState{gpufleet.AttemptStarting, gpufleet.AttemptRunning, gpufleet.AttemptSucceeded,
			gpufleet.AttemptFailed, gpufleet.AttemptStopped} {
			ch <- prometheus.MustNewConstMetric(D.attempts, prometheus.GaugeValue, float64(v.attempts[st]), v.node, string(st))
		}
	})
}

func boolf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// migShareOf is the share of its GPU the MIG instance uuid is (1 when
// unknown, so a share is never divided by zero).
func migShareOf(devs []gpu.Device, uuid string) float64 {
	for _, d := range devs {
		for _, m := range d.MIG {
			if m.UUID == uuid {
				return migShare(m.Profile)
			}
		}
	}
	return 1
}

// dcgmLabels are dcgm-exporter's labels (render_metrics.go): gpu, UUID,
// pci_bus_id, device, modelName, Hostname, DCGM_FI_DRIVER_VERSION, the
// job holding the GPU (hpc_job), and for a MIG instance's series its
// GPU_I_PROFILE and GPU_I_ID (empty, that is absent, on a whole GPU's).
var dcgmLabels = []string{"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION", "hpc_job", "GPU_I_PROFILE", "GPU_I_ID"}

func dcgm(name, help string, t prometheus.ValueType) desc {
	return desc{prometheus.NewDesc(name, help, dcgmLabels, nil), t}
}

// dcgmDescs are dcgm-exporter's fields in its units (percent, MiB, W, mJ,
// MHz, C; PROF_* ratios 0-1).
var dcgmDescs = struct {
	gpuUtil, memCopyUtil, fbUsed, fbFree, power, energy, gpuTemp, memTemp, smClock, memClock,
	smActive, smOcc, dramActive, tensorActive, xid, eccSBEVol, eccDBEVol, eccSBEAgg, eccDBEAgg,
	pcieReplay, remapCorr, remapUnc, remapFail, powerViol, thermViol,
	encUtil, decUtil, pcieTx, pcieRx, nvlinkTx, nvlinkRx desc
}{
	gpuUtil:      dcgm("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", prometheus.GaugeValue),
	memCopyUtil:  dcgm("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", prometheus.GaugeValue),
	fbUsed:       dcgm("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", prometheus.GaugeValue),
	fbFree:       dcgm("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", prometheus.GaugeValue),
	power:        dcgm("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", prometheus.GaugeValue),
	energy:       dcgm("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Total energy consumption since boot (in mJ).", prometheus.CounterValue),
	gpuTemp:      dcgm("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", prometheus.GaugeValue),
	memTemp:      dcgm("DCGM_FI_DEV_MEMORY_TEMP", "Memory temperature (in C).", prometheus.GaugeValue),
	smClock:      dcgm("DCGM_FI_DEV_SM_CLOCK", "SM frequency (in MHz).", prometheus.GaugeValue),
	memClock:     dcgm("DCGM_FI_DEV_MEM_CLOCK", "Memory frequency (in MHz).", prometheus.GaugeValue),
	smActive:     dcgm("DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp assigned (in %).", prometheus.GaugeValue),
	smOcc:        dcgm("DCGM_FI_PROF_SM_OCCUPANCY", "The ratio of number of warps resident on an SM (in %).", prometheus.GaugeValue),
	dramActive:   dcgm("DCGM_FI_PROF_DRAM_ACTIVE", "Ratio of cycles the device memory interface is active sending or receiving data (in %).", prometheus.GaugeValue),
	tensorActive: dcgm("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles the tensor (HMMA) pipe is active (in %).", prometheus.GaugeValue),
	xid:          dcgm("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", prometheus.GaugeValue),
	eccSBEVol:    dcgm("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Total number of single-bit volatile ECC errors.", prometheus.CounterValue),
	eccDBEVol:    dcgm("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors.", prometheus.CounterValue),
	eccSBEAgg:    dcgm("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "Total number of single-bit persistent ECC errors.", prometheus.CounterValue),
	eccDBEAgg:    dcgm("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "Total number of double-bit persistent ECC errors.", prometheus.CounterValue),
	pcieReplay:   dcgm("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "Total number of PCIe retries.", prometheus.CounterValue),
	remapCorr:    dcgm("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for correctable errors.", prometheus.CounterValue),
	remapUnc:     dcgm("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for uncorrectable errors.", prometheus.CounterValue),
	remapFail:    dcgm("DCGM_FI_DEV_ROW_REMAP_FAILURE", "Whether remapping of rows has failed.", prometheus.GaugeValue),
	powerViol:    dcgm("DCGM_FI_DEV_POWER_VIOLATION", "Throttling duration due to power constraints (in us).", prometheus.CounterValue),
	thermViol:    dcgm("DCGM_FI_DEV_THERMAL_VIOLATION", "Throttling duration due to thermal constraints (in us).", prometheus.CounterValue),
	encUtil:      dcgm("DCGM_FI_DEV_ENC_UTIL", "Encoder utilization (in %).", prometheus.GaugeValue),
	decUtil:      dcgm("DCGM_FI_DEV_DEC_UTIL", "Decoder utilization (in %).", prometheus.GaugeValue),
	pcieTx:       dcgm("DCGM_FI_PROF_PCIE_TX_BYTES", "The rate of data transmitted over the PCIe bus, in bytes per second.", prometheus.GaugeValue),
	pcieRx:       dcgm("DCGM_FI_PROF_PCIE_RX_BYTES", "The rate of data received over the PCIe bus, in bytes per second.", prometheus.GaugeValue),
	nvlinkTx:     dcgm("DCGM_FI_PROF_NVLINK_TX_BYTES", "The rate of data transmitted over NVLink, in bytes per second.", prometheus.GaugeValue),
	nvlinkRx:     dcgm("DCGM_FI_PROF_NVLINK_RX_BYTES", "The rate of data received over NVLink, in bytes per second.", prometheus.GaugeValue),
}

// DCGMCollector exports the dcgm-exporter-compatible set from src, so
// dashboards built for dcgm-exporter (Grafana 12239) work unchanged.
func DCGMCollector(src func() metricsView) prometheus.Collector {
	return collector(func(ch chan<- prometheus.Metric) {
		v := src()
		D := &dcgmDescs
		const mib = 1 << 20
		for _, d := range v.devices {
			lv := []string{strconv.Itoa(d.Index), d.UUID, d.PCIBusID, "nvidia" + strconv.Itoa(d.Index), d.Name, v.hostname, v.driver, v.holders[d.UUID].Job, "", ""}
			emit := func(m desc, val float64) { ch <- prometheus.MustNewConstMetric(m.d, m.typ, val, lv...) }
			// The last XID, 0 until the GPU raises one (as dcgm-exporter),
			// so that rules and panels see the series from the start.
			emit(D.xid, float64(v.lastXID[d.UUID]))
			s, ok := v.latest[d.UUID]
			if !ok {
				continue
			}
			f := func(m desc, p *float64, scale float64) {
				if p != nil {
					emit(m, *p*scale)
				}
			}
			u := func(m desc, p *uint64, scale float64) {
				if p != nil {
					emit(m, float64(*p)*scale)
				}
			}
			f(D.gpuUtil, s.Utilization, 100)
			f(D.memCopyUtil, s.MemoryUtilization, 100)
			if s.MemoryUsedBytes != nil {
				emit(D.fbUsed, float64(*s.MemoryUsedBytes/mib))
			}
			if s.MemoryFreeBytes != nil {
				emit(D.fbFree, float64(*s.MemoryFreeBytes/mib))
			}
			f(D.power, s.PowerWatts, 1)
			u(D.energy, s.EnergyMillijoules, 1)
			f(D.gpuTemp, s.TemperatureC, 1)
			f(D.memTemp, s.MemoryTemperatureC, 1)
			f(D.smClock, s.SMClockMHz, 1)
			f(D.memClock, s.MemoryClockMHz, 1)
			f(D.smActive, s.SMActivity, 1)
			f(D.smOcc, s.SMOccupancy, 1)
			f(D.dramActive, s.DRAMActivity, 1)
			f(D.tensorActive, s.TensorActivity, 1)
			u(D.eccSBEVol, s.ECCCorrectedVolatile, 1)
			u(D.eccDBEVol, s.ECCUncorrectedVolatile, 1)
			u(D.eccSBEAgg, s.ECCCorrectedAggregate, 1)
			u(D.eccDBEAgg, s.ECCUncorrectedAggregate, 1)
			u(D.pcieReplay, s.PCIeReplayCount, 1)
			u(D.remapCorr, s.RemappedRowsCorrectable, 1)
			u(D.remapUnc, s.RemappedRowsUncorrectable, 1)
			if s.RowRemapFailure != nil {
				emit(D.remapFail, boolf(*s.RowRemapFailure))
			}
			u(D.powerViol, s.PowerViolationNs, 1e-3)
			u(D.thermViol, s.ThermalViolationNs, 1e-3)
			f(D.encUtil, s.EncoderUtilization, 100)
			f(D.decUtil, s.DecoderUtilization, 100)
			f(D.pcieTx, s.PCIeTxBytesPerSecond, 1)
			f(D.pcieRx, s.PCIeRxBytesPerSecond, 1)
			if r, ok := v.nvlinkRate[d.UUID]; ok {
				emit(D.nvlinkTx, r[0])
				emit(D.nvlinkRx, r[1])
			}
			// Each MIG instance's memory, under the GPU's labels plus
			// GPU_I_PROFILE and GPU_I_ID, as dcgm-exporter does.
			insts := map[string]gpu.MIGInstance{}
			for _, m := range d.MIG {
				insts[m.UUID] = m
			}
			for _, r := range s.MIG {
				m, ok := insts[r.UUID]
				if !ok {
					continue
				}
				mlv := slices.Clone(lv)
				mlv[7], mlv[8], mlv[9] = v.holders[m.UUID].Job, m.Profile, strconv.Itoa(m.GPUInstanceID)
				if r.MemoryUsedBytes != nil {
					ch <- prometheus.MustNewConstMetric(D.fbUsed.d, D.fbUsed.typ, float64(*r.MemoryUsedBytes/mib), mlv...)
				}
				if r.MemoryFreeBytes != nil {
					ch <- prometheus.MustNewConstMetric(D.fbFree.d, D.fbFree.typ, float64(*r.MemoryFreeBytes/mib), mlv...)
				}
			}
		}
	})
}
