"""The interleaved measuring campaign of one preset's combos in one process
(:mod:`~meddpm.measure.campaign.interleaved`) and the model FLOPs its figures use
(:mod:`~meddpm.measure.campaign.flops`)."""
