"""The interleaved measuring campaign of one preset's combos in one process
(:mod:`~meddpm.measure.campaign.interleaved`), the model FLOPs its figures use
(:mod:`~meddpm.measure.campaign.flops`) and the time of a full sample (:mod:`~meddpm.measure.campaign.sampling`)."""
