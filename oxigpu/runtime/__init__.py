"""The runtime between a backend and the user: ``engine`` (KV-cache bookkeeping with prefix reuse, chunked
prefill, the decode loop), ``params`` (SamplingParams, GenerationResult, Timings), ``stops`` (stop strings
held back until they cannot match) and ``sampling`` (the numpy sampler and its counter-based RNG)."""
