package vllmmetrics

// vLLM's metric names (vllm/v1/metrics/loggers.py), newest generation first;
// the first is what current releases, and the simulator, write.
// prometheus_client (Python) writes a counter's family as name_total in the
// text format, other exporters as name: both spellings are listed. Older
// releases prefixed the cache's names with gpu_.
var (
	Running          = []string{"vllm:num_requests_running"}
	Waiting          = []string{"vllm:num_requests_waiting"}
	KVUsage          = []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}
	PrefixQueries    = []string{"vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries"}
	PrefixHits       = []string{"vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits"}
	PromptTokens     = []string{"vllm:prompt_tokens_total", "vllm:prompt_tokens"}
	GenerationTokens = []string{"vllm:generation_tokens_total", "vllm:generation_tokens"}
	RequestSuccess   = []string{"vllm:request_success_total", "vllm:request_success"}
	Preemptions      = []string{"vllm:num_preemptions_total", "vllm:num_preemptions"}
	// TTFT and ITL are histograms: the time to first token, and the time
	// between output tokens (time_per_output_token in older releases).
	TTFT = []string{"vllm:time_to_first_token_seconds"}
	ITL  = []string{"vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"}
	// CacheConfig is an info gauge (value 1) whose labels carry the KV
	// cache's configuration: LabelBlockSize, LabelNumGPUBlocks, ...
	CacheConfig = []string{"vllm:cache_config_info"}
)

// Label names.
const (
	// LabelEngine names the data-parallel rank of a series in the
	// one-endpoint shape (one /metrics for every rank).
	LabelEngine = "engine"
	// LabelModel names the served model.
	LabelModel = "model_name"
	// Labels of CacheConfig.
	LabelBlockSize            = "block_size"
	LabelNumGPUBlocks         = "num_gpu_blocks"
	LabelGPUMemoryUtilization = "gpu_memory_utilization"
)
