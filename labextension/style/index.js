import '@kernel-cluster/widgets/src/styles.css';
import './base.css';
