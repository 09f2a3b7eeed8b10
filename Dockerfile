# autoselect layered onto the official vLLM image: the same vLLM, torch, FlashInfer and CUDA
# that will serve the model also run `autoselect bench` / `confirm`, so the measurements are
# taken with the software they are about.
#
#   docker build -t autoselect-vllm:0.34.0 .
#   docker build -t autoselect-vllm:0.33.0 --build-arg VLLM_VERSION=0.33.0 .
#   docker run --rm --gpus all --ipc=host -v "$PWD/autoselect-data:/data" \
#       -v "$HOME/.cache/huggingface:/root/.cache/huggingface" \
#       autoselect-vllm:0.34.0 bench --model deepseek-ai/DeepSeek-R1
#
# The default command prints the help; any autoselect subcommand can follow the image name.
ARG VLLM_VERSION=0.34.0
FROM vllm/vllm-openai:v${VLLM_VERSION}

ARG VLLM_VERSION
LABEL org.opencontainers.image.title="autoselect" \
      org.opencontainers.image.description="Benchmark vLLM's MoE all2all backends on NVLink GPUs and pick the fastest legal one" \
      org.opencontainers.image.licenses="Apache-2.0" \
      io.autoselect.vllm-version="${VLLM_VERSION}"

WORKDIR /opt/autoselect
COPY pyproject.toml README.md ./
COPY autoselect ./autoselect
COPY bench ./bench
COPY db ./db

# Install autoselect (with Ray for `fleet`) and its light dependencies WITHOUT touching what
# the image ships: every package already installed (torch, vllm, flashinfer-python, triton, numpy ...) is
# pinned to its installed version through a constraints file, so pip never swaps in another
# torch build. uv is what the vLLM image installs with; pip is the fallback.
RUN python3 -m pip list --format=freeze 2>/dev/null > /tmp/image-packages.txt \
    || uv pip freeze --system > /tmp/image-packages.txt; \
    if command -v uv >/dev/null 2>&1; then \
        uv pip install --system --no-cache -c /tmp/image-packages.txt ".[fleet]" ; \
    else \
        python3 -m pip install --no-cache-dir -c /tmp/image-packages.txt ".[fleet]" ; \
    fi \
    && python3 -c "import autoselect, vllm; print('autoselect', autoselect.__version__, 'on vLLM', vllm.__version__)" \
    && rm /tmp/image-packages.txt

# Results live on a volume; vLLM in this image is the one `check` / `recommend --validate` ask.
ENV AUTOSELECT_DB=/data/results.db
VOLUME ["/data"]

# The vLLM image's entrypoint is `vllm serve`; this image's is autoselect.
ENTRYPOINT ["autoselect"]
CMD ["--help"]
