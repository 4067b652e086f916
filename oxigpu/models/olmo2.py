"""OLMo 2 (and OLMo 3's sliding-window layers): no norms before attention and the FFN, RMS norms after
them instead, RMS norms on q and k over all heads (not per head), NEOX RoPE, untied LM head. With a
sliding window in the file, 3 of every 4 layers use it (unless the file's pattern says otherwise), with
unscaled RoPE."""
from .family import Family, SlidingWindow

OLMO2 = Family("olmo2", rope_neox=True, norm_eps=1e-6, qk_norm="full", pre_norms=False, post_norms=True,
               swa=SlidingWindow(pattern=4, rope_scaled=False))
