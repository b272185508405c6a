"""The interleaved measuring campaign of one preset's combos in one process
(:mod:`~meddpm.measure.campaign.interleaved`), what a campaign measured, a combo's runs one per process
(:mod:`~meddpm.measure.campaign.result`), what every campaign offers its readers
(:mod:`~meddpm.measure.campaign.protocol`), the settings it runs with and their options
(:mod:`~meddpm.measure.campaign.settings`), the model FLOPs its figures use (:mod:`~meddpm.measure.campaign.flops`)
and the time of a full sample (:mod:`~meddpm.measure.campaign.sampling`)."""
