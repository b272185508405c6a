"""Energy from the card's counter: windows and their error bound (:mod:`~meddpm.measure.energy.counter`), blocks
of back-to-back iterations (:mod:`~meddpm.measure.energy.block`), when the temperature holds
(:mod:`~meddpm.measure.energy.heat_soak`), the sampled power and clock (:mod:`~meddpm.measure.energy.power_sampler`)
and a full sample's energy (:mod:`~meddpm.measure.energy.sample`); the method: docs/energy.md."""
