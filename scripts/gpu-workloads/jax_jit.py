"""A JAX jit loop (XLA launches through the driver API). JAX has no per-launch counter of its
own; the check is that launches are seen and named, and their count is stable per step."""

import common


def main():
    args = common.parser(__doc__).parse_args()
    import jax
    import jax.numpy as jnp

    @jax.jit
    def step_fn(w, x):
        y = jnp.tanh(x @ w)
        return w - 0.01 * (x.T @ y), jnp.sum(y)

    key = jax.random.PRNGKey(0)
    w = jax.random.normal(key, (1024, 1024))
    x = jax.random.normal(key, (512, 1024))
    state = {"w": w}

    def step():
        state["w"], s = step_fn(state["w"], x)
        s.block_until_ready()

    common.timed_steps(args.warmup, step, lambda: None)
    times = common.timed_steps(args.steps, step, lambda: None)
    common.write(args.out, "jax_jit", args.warmup + args.steps, times,
                 known={"jit_steps": args.warmup + args.steps})


if __name__ == "__main__":
    main()
