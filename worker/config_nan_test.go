package worker

import "testing"

// TestSampleRatioNaNRefused: tracing.sample_ratio must be within [0, 1];
// YAML's .nan is neither, yet passes the range check (every comparison
// with NaN is false) and reaches the sampler.
func TestSampleRatioNaNRefused(t *testing.T) {
	cfg, err := Load("config.yaml", []byte("tracing:\n  exporter: stdout\n  sample_ratio: .nan\njobs:\n  - name: lottery\n    schedule: \"@every 10s\"\n"), []string{"lottery"})
	if err == nil {
		t.Errorf("sample_ratio: .nan accepted; the config holds %v", cfg.Tracing.SampleRatio)
	}
}
