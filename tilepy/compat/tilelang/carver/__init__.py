"""`tilelang.carver`: TileLang's GPU schedule recommender. Its device query
(`arch.driver.get_num_sms`) has a CPU meaning (the processors that run blocks at once); its
GPU models and tile recommender (`arch.CUDA`, `template.*Template`) have none and raise
NotPortableError when used."""

from tilepy.compat.tilelang.carver import arch, roller, template  # noqa: F401
