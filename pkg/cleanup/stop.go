package cleanup

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// PollInterval is how often StopDeployment looks for the pods that are left.
const PollInterval = time.Second

// StopDeployment scales a Deployment to zero replicas and waits until none
// of its pods is left, so none of them can still be writing. A Deployment
// that does not exist is already stopped. It waits as long as ctx allows.
func StopDeployment(ctx context.Context, kube kubernetes.Interface, namespace, name string) error {
	logger := klog.FromContext(ctx)
	deployments := kube.AppsV1().Deployments(namespace)
	scale, err := deployments.GetScale(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		logger.Info("No Deployment to stop", "deployment", klog.KRef(namespace, name))
		return nil
	}
	if err != nil {
		return fmt.Errorf("get the scale of deployment %s/%s: %w", namespace, name, err)
	}
	if scale.Spec.Replicas != 0 {
		scale.Spec.Replicas = 0
		if scale, err = deployments.UpdateScale(ctx, name, scale, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("scale deployment %s/%s to 0: %w", namespace, name, err)
		}
		logger.Info("Scaled to 0", "deployment", klog.KRef(namespace, name))
	}
	selector := scale.Status.Selector
	if selector == "" {
		return fmt.Errorf("deployment %s/%s reports no pod selector", namespace, name)
	}
	var left int
	err = wait.PollUntilContextCancel(ctx, PollInterval, true, func(ctx context.Context) (bool, error) {
		pods, err := kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, fmt.Errorf("list the pods of deployment %s/%s: %w", namespace, name, err)
		}
		if len(pods.Items) != left {
			left = len(pods.Items)
			logger.Info("Waiting for pods to stop", "deployment", klog.KRef(namespace, name), "pods", left)
		}
		return left == 0, nil
	})
	if err != nil {
		return fmt.Errorf("wait for the pods of deployment %s/%s to stop (%d left): %w", namespace, name, left, err)
	}
	return nil
}
