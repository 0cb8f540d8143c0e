package vllmmetrics

import (
	"errors"
	"io"
	"net/http"
	"strconv"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// Accept asks for the classic text format (what vLLM serves); the
// response's Content-Type still decides how it is parsed.
const Accept = "text/plain;version=0.0.4;q=1,*/*;q=0.1"

// MaxBytes bounds one /metrics body a reader accepts (vLLM's is tens of KiB).
const MaxBytes = 16 << 20

// Parse decodes a Prometheus exposition with expfmt in the format its header
// names; an unknown or missing Content-Type is read as the classic text
// format. A decoding error is returned as expfmt gives it, for the caller
// to wrap in its own.
func Parse(r io.Reader, h http.Header) (map[string]*dto.MetricFamily, error) {
	format := expfmt.ResponseFormat(h)
	if format.FormatType() == expfmt.TypeUnknown {
		format = expfmt.NewFormat(expfmt.TypeTextPlain)
	}
	dec := expfmt.NewDecoder(r, format)
	fams := map[string]*dto.MetricFamily{}
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err != nil {
			if errors.Is(err, io.EOF) {
				return fams, nil
			}
			return nil, err
		}
		fams[mf.GetName()] = &mf
	}
}

// Find returns the family of the first of names that fams holds (the newest
// generation present wins; generations are never mixed), or nil. A nil
// family's GetMetric is empty, so a caller can range over it either way.
func Find(fams map[string]*dto.MetricFamily, names []string) *dto.MetricFamily {
	for _, n := range names {
		if mf, ok := fams[n]; ok {
			return mf
		}
	}
	return nil
}

// Value reads a gauge, counter or untyped sample (0 for other types).
func Value(m *dto.Metric) float64 {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// Label returns the value of the series' label name and whether it has one.
func Label(m *dto.Metric, name string) (string, bool) {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue(), true
		}
	}
	return "", false
}

// Engine is the series' engine label ("" when it has none).
func Engine(m *dto.Metric) string {
	e, _ := Label(m, LabelEngine)
	return e
}

// CacheConfigOf is what a CacheConfig series says about the KV cache.
type CacheConfigOf struct {
	BlockSize            int
	NumGPUBlocks         int
	GPUMemoryUtilization float64
}

// ReadCacheConfig reads a CacheConfig series' labels (zero for a label that
// is missing or not a number).
func ReadCacheConfig(m *dto.Metric) CacheConfigOf {
	var c CacheConfigOf
	for _, l := range m.GetLabel() {
		switch l.GetName() {
		case LabelBlockSize:
			c.BlockSize, _ = strconv.Atoi(l.GetValue())
		case LabelNumGPUBlocks:
			c.NumGPUBlocks, _ = strconv.Atoi(l.GetValue())
		case LabelGPUMemoryUtilization:
			c.GPUMemoryUtilization, _ = strconv.ParseFloat(l.GetValue(), 64)
		}
	}
	return c
}

// KVCapacityTokens is num_gpu_blocks × block_size of a CacheConfig series,
// the cache's size in tokens (0 when either label is missing).
func KVCapacityTokens(m *dto.Metric) float64 {
	var blocks, size float64
	for _, l := range m.GetLabel() {
		switch l.GetName() {
		case LabelNumGPUBlocks:
			blocks, _ = strconv.ParseFloat(l.GetValue(), 64)
		case LabelBlockSize:
			size, _ = strconv.ParseFloat(l.GetValue(), 64)
		}
	}
	return blocks * size
}

// Histogram returns a histogram series' sum and count (zero for another type).
func Histogram(m *dto.Metric) (sum, count float64) {
	h := m.GetHistogram()
	return h.GetSampleSum(), float64(h.GetSampleCount())
}
