cd .gpu/src
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
TORCHSTRATA_DIRECT_LAUNCH=1 timeout 45 python3 ../check_direct.py 2>&1 | grep -v "Warn\|warn\|detach\|return float"
TORCHSTRATA_DIRECT_LAUNCH=1 timeout 20 python3 ../prof_train.py 2>&1 | grep "us/step"
